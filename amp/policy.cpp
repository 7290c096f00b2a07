#include <mixprec/amp/policy.hpp>

#include <array>
#include <stdexcept>
#include <utility>

namespace mixprec::amp {
namespace {

using autodiff::Dtype;

constexpr std::array<std::pair<std::string_view, Dtype>, 6> policies{{{"float32", Dtype::float32},
                                                                      {"mixed_float16", Dtype::float16},
                                                                      {"mixed_bfloat16", Dtype::bfloat16},
                                                                      {"mixed_cbfloat16", Dtype::cbfloat16},
                                                                      {"mixed_float8", Dtype::bfloat16},
                                                                      {"mixed_mxfp8", Dtype::bfloat16}}};

Policy& current() {
    thread_local Policy policy("float32");
    return policy;
}

} // namespace

Policy::Policy(std::string_view name) {
    for (const auto& [n, dtype] : policies)
        if (n == name) {
            name_ = std::string(n);
            compute_ = dtype;
            return;
        }
    std::string valid;
    for (const auto& p : policies) valid += (valid.empty() ? "" : ", ") + std::string(p.first);
    throw std::invalid_argument("unknown dtype policy '" + std::string(name) + "' (valid: " + valid + ")");
}

bool Policy::needs_loss_scaling() const { return compute_ == Dtype::float16 || compute_ == Dtype::cbfloat16; }

bool Policy::fp8_products() const { return name_ == "mixed_float8"; }

bool Policy::mx_products() const { return name_ == "mixed_mxfp8"; }

const Policy& global_policy() { return current(); }

void set_global_policy(const Policy& policy) { current() = policy; }

} // namespace mixprec::amp
