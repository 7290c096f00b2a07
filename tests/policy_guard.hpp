#pragma once
// Sets the global dtype policy for a test and puts float32 back when it ends, pass or fail.

#include <mixprec/amp/policy.hpp>

namespace test_data {

struct PolicyGuard {
    explicit PolicyGuard(const char* name) { mixprec::amp::set_global_policy(name); }
    ~PolicyGuard() { mixprec::amp::set_global_policy("float32"); }
};

} // namespace test_data
