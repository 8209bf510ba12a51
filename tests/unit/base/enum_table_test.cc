// SPDX-License-Identifier: Apache-2.0
// is_enum_table (kprism/base/enum_table.h): whole tables in the enum's order pass; short, long or
// reordered ones do not.
#include "kprism/base/enum_table.h"

#include <gtest/gtest.h>

namespace kprism {
namespace {

enum class Colour { red, green, blue, last = blue };
struct Row {
    Colour colour;
    const char* name;
};
constexpr Row kWhole[] = {{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}};
constexpr Row kShort[] = {{Colour::red, "red"}, {Colour::green, "green"}};
constexpr Row kLong[] = {{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}, {Colour::blue, "b"}};
constexpr Row kSwapped[] = {{Colour::red, "red"}, {Colour::blue, "blue"}, {Colour::green, "green"}};

TEST(EnumTable, WholeAndInOrderOnly) {
    static_assert(is_enum_table<&Row::colour>(kWhole));
    static_assert(!is_enum_table<&Row::colour>(kShort));
    static_assert(!is_enum_table<&Row::colour>(kLong));
    static_assert(!is_enum_table<&Row::colour>(kSwapped));
    EXPECT_STREQ(kWhole[static_cast<size_t>(Colour::green)].name, "green");
}

}  // namespace
}  // namespace kprism
