// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the libFuzzer targets: a check that aborts, and input chunking for incremental parsers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

// An invariant of the code under test: abort (libFuzzer saves the input as a crash) when it fails.
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);     \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)

namespace fuzz {

// FNV-1a over the input: the seed of the chunking, so the same input always splits the same way.
inline uint64_t hash(const uint8_t* data, size_t size) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

// splitmix64.
inline uint64_t next(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Piece sizes that add up to `size`: mostly small (1-16 bytes, as a slow or hostile peer sends),
// sometimes up to 4 KiB (a TLS record's worth), sometimes empty (a read of zero bytes).
inline std::vector<size_t> random_pieces(size_t size, uint64_t seed) {
    std::vector<size_t> out;
    size_t left = size;
    while (left > 0) {
        uint64_t r = next(seed);
        size_t n;
        switch (r % 8) {
        case 0: n = 0; break;
        case 1: case 2: n = 1 + (r >> 8) % 4096; break;
        default: n = 1 + (r >> 8) % 16; break;
        }
        n = n < left ? n : left;
        out.push_back(n);
        left -= n;
    }
    return out;
}

inline std::vector<size_t> whole(size_t size) { return {size}; }
inline std::vector<size_t> bytewise(size_t size) { return std::vector<size_t>(size, 1); }

// A copy of one piece in a heap block of exactly its size, so that AddressSanitizer reports any
// read past the bytes handed to the parser (a zero-size piece is a distinct, unreadable block).
class Piece {
public:
    Piece(const uint8_t* p, size_t n) : mem_(new char[n]), n_(n) {
        if (n) std::memcpy(mem_.get(), p, n);
    }
    const char* data() const { return mem_.get(); }
    size_t size() const { return n_; }

private:
    std::unique_ptr<char[]> mem_;
    size_t n_;
};

}  // namespace fuzz
