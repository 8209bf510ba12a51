// SPDX-License-Identifier: Apache-2.0
// Tables with one row per value of an enum: the compile-time check that keeps them whole and in order.
#pragma once

#include <cstddef>
#include <type_traits>

namespace kprism {

// True when `table` has a row per value of its key's enum class (which ends with `last`), in the
// enum's order, so that table[static_cast<size_t>(e)] is e's row. Use in a static_assert beside
// the table: is_enum_table<&Row::key>(kTable).
template <auto Key, class Row, size_t N>
consteval bool is_enum_table(const Row (&table)[N]) {
    using E = std::remove_cvref_t<decltype(table[0].*Key)>;
    if (static_cast<size_t>(E::last) + 1 != N) return false;
    for (size_t i = 0; i < N; ++i)
        if (static_cast<size_t>(table[i].*Key) != i) return false;
    return true;
}

}  // namespace kprism
