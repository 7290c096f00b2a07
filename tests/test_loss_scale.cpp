#define BOOST_TEST_MODULE loss_scale
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <cmath>
#include <random>

using namespace mixprec::amp;

namespace {

LossScale make(std::string_view preset, LossScaleOptions changes(LossScaleOptions)) {
    return LossScale(changes(loss_scale_preset(preset)));
}

std::vector<float> run(LossScale& s, const std::string& steps) { // '.' finite step, '!' overflow
    std::vector<float> out;
    for (char c : steps) {
        s.update(c == '.');
        out.push_back(s.scale());
    }
    return out;
}

/// What LossScale says when it refuses `o` ("<accepted>" when it does not).
std::string message(const LossScaleOptions& o) {
    try {
        LossScale s(o);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "<accepted>";
}

} // namespace

// ---- Golden sequences from the anchors' own test suites (research §4) ----

BOOST_AUTO_TEST_CASE(keras_downscaling_and_upscaling) {
    auto down = make("keras", [](auto o) {
        o.initial_scale = 400;
        return o;
    });
    run(down, "!!!!");
    BOOST_TEST(down.scale() == 25.0f); // keras test_downscaling
    auto up = make("keras", [](auto o) {
        o.initial_scale = 2;
        o.growth_interval = 2;
        return o;
    });
    run(up, "........");
    BOOST_TEST(up.scale() == 32.0f); // keras test_upscaling
}

BOOST_AUTO_TEST_CASE(tf_keras_dynamic_update_and_floor) {
    auto s = make("tf_keras", [](auto o) {
        o.initial_scale = 2;
        o.growth_interval = 1;
        return o;
    });
    BOOST_TEST(run(s, ".!") == (std::vector<float>{4, 2}), boost::test_tools::per_element());     // testDynamicUpdate
    BOOST_TEST(run(s, "!!!") == (std::vector<float>{1, 1, 1}), boost::test_tools::per_element()); // floor 1
}

BOOST_AUTO_TEST_CASE(pytorch_update_scale_and_scaling_case) {
    // test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2, scale 4
    auto s = make("pytorch", [](auto o) {
        o.initial_scale = 4;
        o.growth_interval = 2;
        o.backoff_factor = 0.25f;
        return o;
    });
    s.update(true);
    BOOST_TEST(s.state().growth_counter == 1);
    BOOST_TEST(s.scale() == 4.0f);
    s.update(true);
    BOOST_TEST(s.state().growth_counter == 0);
    BOOST_TEST(s.scale() == 8.0f);
    s.update(false);
    BOOST_TEST(s.state().growth_counter == 0);
    BOOST_TEST(s.scale() == 2.0f);
    // _run_scaling_case: init 128, growth 2, interval 1, 4 iterations with one skipped -> 128·2³·0.5
    auto c = make("pytorch", [](auto o) {
        o.initial_scale = 128;
        o.growth_interval = 1;
        return o;
    });
    run(c, "..!.");
    BOOST_TEST(c.scale() == 512.0f);
    // test_grad_scale_will_not_overflow: init 1e38, growth 2^4, interval 1
    auto big = make("pytorch", [](auto o) {
        o.initial_scale = 1e38f;
        o.growth_factor = 16;
        o.growth_interval = 1;
        return o;
    });
    run(big, "....");
    BOOST_TEST(big.scale() == 1e38f);
}

BOOST_AUTO_TEST_CASE(deepspeed_no_all_some_overflow) {
    // test_no_overflow: init 2^8, window 2: grows on the (window+1)-th clean step, then every window
    auto s = make("deepspeed", [](auto o) {
        o.initial_scale = 256;
        o.growth_interval = 2;
        o.hysteresis = 1;
        return o;
    });
    BOOST_TEST(run(s, "........") == (std::vector<float>{256, 256, 512, 512, 1024, 1024, 2048, 2048}),
               boost::test_tools::per_element());
    BOOST_TEST(s.state().iteration == 8);
    // test_all_overflow: init 2^4 halves every step down to min_scale (keep going here; raise below)
    auto all = make("deepspeed", [](auto o) {
        o.initial_scale = 16;
        o.hysteresis = 1;
        o.at_min_scale = AtMinScale::keep_going;
        return o;
    });
    BOOST_TEST(run(all, "!!!!!!") == (std::vector<float>{8, 4, 2, 1, 1, 1}), boost::test_tools::per_element());
    auto raising = make("deepspeed", [](auto o) {
        o.initial_scale = 2;
        o.hysteresis = 1;
        return o;
    });
    run(raising, "!");
    BOOST_CHECK_THROW(raising.update(false), loss_scale_error);
    // test_some_overflow: 2 overflows -> /4; window+1 clean -> x2; 1 overflow -> /2
    auto some = make("deepspeed", [](auto o) {
        o.initial_scale = 256;
        o.growth_interval = 2;
        o.hysteresis = 1;
        return o;
    });
    run(some, "!!");
    BOOST_TEST(some.scale() == 64.0f);
    run(some, "...");
    BOOST_TEST(some.scale() == 128.0f);
    run(some, "!");
    BOOST_TEST(some.scale() == 64.0f);
}

BOOST_AUTO_TEST_CASE(megatron_hysteresis_is_refilled_only_on_growth) {
    auto s = make("megatron", [](auto o) {
        o.initial_scale = 1024;
        o.growth_interval = 3;
        o.hysteresis = 2;
        return o;
    });
    BOOST_TEST(run(s, "!.!!...") == (std::vector<float>{1024, 1024, 512, 256, 256, 256, 512}),
               boost::test_tools::per_element());
    BOOST_TEST(s.state().hysteresis_left == 2);
}

BOOST_AUTO_TEST_CASE(mixprec_hysteresis_fuzz_like_apex) {
    // Apex test_update_scale_hysteresis: hysteresis-1 overflows leave the scale alone, hysteresis+k
    // back it off 1+k times; interval-1 clean steps leave it alone, interval+k grow 1+⌊k/interval⌋ times.
    for (float init : {1.0f, 1024.0f, 65536.0f})
        for (float growth : {2.0f, 4.0f})
            for (float backoff : {0.5f, 0.25f})
                for (int interval : {10, 100})
                    for (int hysteresis : {10, 100}) {
                        const LossScaleOptions o{.initial_scale = init,
                                                 .growth_interval = interval,
                                                 .growth_factor = growth,
                                                 .backoff_factor = backoff,
                                                 .hysteresis = hysteresis,
                                                 .min_scale = 0.0f,
                                                 .max_scale = INFINITY};
                        LossScale a(o);
                        for (int i = 0; i < hysteresis - 1; ++i) a.update(false);
                        BOOST_TEST(a.scale() == init);
                        for (int k = 0; k < 3; ++k) a.update(false);
                        BOOST_TEST(a.scale() == init * std::pow(backoff, 3.0f));
                        LossScale b(o);
                        for (int i = 0; i < interval - 1; ++i) b.update(true);
                        BOOST_TEST(b.scale() == init);
                        for (int k = 0; k < interval + 1; ++k) b.update(true);
                        BOOST_TEST(b.scale() == init * growth * growth);
                    }
}

BOOST_AUTO_TEST_CASE(cerebras_tolerance_and_clamp) {
    auto s = make("cerebras", [](auto o) {
        o.initial_scale = 1024;
        o.growth_interval = 4;
        o.overflow_tolerance = 0.25;
        return o;
    });
    // 1 overflow in 4 steps: 1/1 > 0.25 at once backs off; then three finite steps and an overflow: 1/4 is not > 0.25
    BOOST_TEST(run(s, "!") == std::vector<float>{512}, boost::test_tools::per_element());
    BOOST_TEST(run(s, "...!") == (std::vector<float>{512, 512, 512, 512}), boost::test_tools::per_element());
    BOOST_TEST(run(s, ".") == std::vector<float>{1024}, boost::test_tools::per_element()); // 5 > 4 steps: grow
    auto capped = make("cerebras", [](auto o) {
        o.initial_scale = 32768;
        o.growth_interval = 1;
        return o;
    });
    run(capped, "..");
    BOOST_TEST(capped.scale() == 32768.0f); // clamped to max 2^15
    // get_non_clamped_scale() reports the scale after the clamp to max and before the clamp to min
    // (cerebras-pytorch 2.10: tests/golden/loss_scale/cerebras.jsonl).
    BOOST_TEST(capped.state().unclamped_scale == 32768.0f);
    auto floored = make("cerebras", [](auto o) {
        o.initial_scale = 0x1p-14f;
        return o;
    });
    run(floored, "!");
    BOOST_TEST(floored.scale() == 0x1p-14f); // clamped to min 2^-14
    BOOST_TEST(floored.state().unclamped_scale == 0x1p-15f);
}

BOOST_AUTO_TEST_CASE(ascend_cumulative_decrease) {
    auto s = make("ascend", [](auto o) {
        o.initial_scale = 1000;
        o.growth_interval = 3;
        return o;
    });
    // decr_every_n = 2 counts overflows cumulatively: overflow, finite, overflow backs off once by 0.8
    BOOST_TEST(run(s, "!.!") == (std::vector<float>{1000, 1000, 1000 * 0.8f}), boost::test_tools::per_element());
    BOOST_TEST(run(s, "...") == (std::vector<float>{800, 800, 1600}), boost::test_tools::per_element());
}

// MindSpore's DynamicLossScaleUpdateCell: growth on the N-th step since the last rescale, backoff by the
// float32 reciprocal of its one factor, never below 1; its defaults are 2^24 and 2000.
BOOST_AUTO_TEST_CASE(mindspore_one_factor_and_floor) {
    const LossScaleOptions preset = loss_scale_preset("mindspore");
    BOOST_TEST(preset.initial_scale == 16777216.0f);
    BOOST_TEST(preset.growth_interval == 2000);
    auto s = make("mindspore", [](auto o) {
        o.initial_scale = 3;
        o.growth_interval = 2;
        o.growth_factor = 3;
        o.backoff_factor = 1.0 / 3;
        return o;
    });
    BOOST_TEST(run(s, "..!.!!") == (std::vector<float>{3, 9, 9 * (1.0f / 3.0f), 9 * (1.0f / 3.0f), 1, 1}),
               boost::test_tools::per_element());
    BOOST_TEST(s.state().overflows_counted == 2); // in a row (the manager's bad steps)
    LossScaleOptions two_factors = loss_scale_preset("mindspore");
    two_factors.growth_factor = 4;
    BOOST_CHECK_EXCEPTION(LossScale{two_factors}, std::invalid_argument, [](const std::invalid_argument& e) {
        return std::string(e.what()).find("must be 1 / growth_factor (0.25)") != std::string::npos;
    });
}

// Which rule reads which option: what mixprec-train refuses to take and ignore.
BOOST_AUTO_TEST_CASE(rules_say_which_options_they_read) {
    const char* fields[] = {"growth_factor",  "backoff_factor", "hysteresis",     "consecutive_hysteresis",
                            "min_scale",      "max_scale",      "at_min_scale",   "overflow_tolerance",
                            "decrease_every", "initial_scale",  "growth_interval"};
    for (auto name : loss_scale_preset_names())
        for (const char* field : fields) BOOST_CHECK_NO_THROW(rule_reads(loss_scale_preset(name).rule, field));
    BOOST_TEST(rule_reads(ScaleRule::mixprec, "hysteresis"));
    BOOST_TEST(!rule_reads(ScaleRule::keras, "hysteresis"));
    BOOST_TEST(rule_reads(ScaleRule::deepspeed, "consecutive_hysteresis"));
    BOOST_TEST(!rule_reads(ScaleRule::megatron, "consecutive_hysteresis"));
    BOOST_TEST(!rule_reads(ScaleRule::cerebras, "growth_factor")); // Cerebras doubles and halves
    BOOST_TEST(rule_reads(ScaleRule::cerebras, "overflow_tolerance"));
    BOOST_TEST(!rule_reads(ScaleRule::ascend, "min_scale"));
    BOOST_TEST(rule_reads(ScaleRule::keras, "initial_scale"));
    BOOST_CHECK_THROW(rule_reads(ScaleRule::keras, "no_such_field"), std::invalid_argument);
}

// cerebras_pytorch starts and caps the scale at 2^31 for cbfloat16, at 2^15 for float16 and bfloat16.
BOOST_AUTO_TEST_CASE(cerebras_defaults_depend_on_the_half_dtype) {
    using mixprec::autodiff::Dtype;
    for (Dtype half : {Dtype::float16, Dtype::bfloat16}) {
        BOOST_TEST(loss_scale_preset("cerebras", half).initial_scale == 32768.0f);
        BOOST_TEST(loss_scale_preset("cerebras", half).max_scale == 32768.0f);
    }
    BOOST_TEST(loss_scale_preset("cerebras", Dtype::cbfloat16).initial_scale == 0x1p31f);
    BOOST_TEST(loss_scale_preset("cerebras", Dtype::cbfloat16).max_scale == 0x1p31f);
    BOOST_TEST(loss_scale_preset("pytorch", Dtype::cbfloat16).initial_scale == 65536.0f); // only cerebras
}

// A fixed scale never moves; bad options are refused with the option's name.
BOOST_AUTO_TEST_CASE(fixed_scale_and_validation) {
    LossScale fixed({.dynamic = false, .initial_scale = 128});
    run(fixed, "!!...!.");
    BOOST_TEST(fixed.scale() == 128.0f);
    BOOST_TEST(message({.initial_scale = -1}).find("initial_scale") != std::string::npos);
    BOOST_TEST(message({.growth_interval = 0}).find("growth_interval") != std::string::npos);
    BOOST_TEST(message({.growth_factor = 1}).find("growth_factor") != std::string::npos);
    BOOST_TEST(message({.backoff_factor = 1}).find("backoff_factor") != std::string::npos);
    BOOST_TEST(message({.hysteresis = 0}).find("hysteresis") != std::string::npos);
    BOOST_TEST(message({.min_scale = 10, .max_scale = 5}).find("max_scale") != std::string::npos);
    BOOST_TEST(message({.initial_scale = 1e9f}).find("initial_scale") != std::string::npos); // above max 2^24
    BOOST_TEST(message({.rule = ScaleRule::count}).find("rule") != std::string::npos);
    BOOST_CHECK_THROW(loss_scale_preset("apex"), std::invalid_argument);
    for (auto name : loss_scale_preset_names()) BOOST_CHECK_NO_THROW(LossScale(loss_scale_preset(name)));
    // Every rule has a preset of its own name, and positions past the last rule name none.
    const auto names = loss_scale_preset_names();
    BOOST_TEST(names.size() == static_cast<std::size_t>(ScaleRule::count));
    for (std::size_t i = 0; i < names.size(); ++i) {
        BOOST_TEST((loss_scale_preset(names[i]).rule == static_cast<ScaleRule>(i)));
        BOOST_TEST(name_of(*scale_rule_at(i)) == names[i]);
    }
    BOOST_TEST(!scale_rule_at(names.size()).has_value());
}

// Enhanced loss scaling (Mellempudi et al. 2019): a floor that rises with the steps keeps the scale up
// through overflows that would back it off, and starts the scale at the first floor.
BOOST_AUTO_TEST_CASE(a_floor_that_rises) {
    LossScale s({.initial_scale = 1024, .min_scale_schedule = {{0, 1}, {3, 256}, {6, 4096}}});
    BOOST_TEST(run(s, "!!!!!!!!") == (std::vector<float>{512, 256, 256, 256, 256, 4096, 4096, 4096}),
               boost::test_tools::per_element());
    BOOST_TEST(s.state().updates == 8);
    LossScale grows({.initial_scale = 8, .growth_interval = 2, .min_scale_schedule = {{0, 16}}});
    BOOST_TEST(grows.scale() == 16.0f);
    BOOST_TEST(run(grows, "..!") == (std::vector<float>{16, 32, 16}), boost::test_tools::per_element());
    // Every rule reads it: after step 2 no overflow takes any rule below the floor.
    for (auto name : loss_scale_preset_names()) {
        LossScaleOptions o = loss_scale_preset(name);
        const float floor = std::min(o.max_scale, o.initial_scale * 4);
        o.min_scale_schedule = {{2, floor}};
        BOOST_TEST(rule_reads(o.rule, "min_scale_schedule"));
        LossScale rule(o);
        const std::vector<float> scales = run(rule, "!!!!!!");
        for (std::size_t i = 1; i < scales.size(); ++i) BOOST_TEST(scales[i] >= floor, name << " step " << i);
    }
    BOOST_TEST(message({.min_scale_schedule = {{5, 2}, {5, 4}}}).find("min_scale_schedule[1].step") !=
               std::string::npos);
    BOOST_TEST(message({.min_scale_schedule = {{0, 4}, {5, 2}}}).find("min_scale_schedule[1].scale") !=
               std::string::npos);
    BOOST_TEST(message({.min_scale_schedule = {{-1, 2}}}).find("[0].step") != std::string::npos);
    BOOST_TEST(message({.min_scale_schedule = {{0, 1e9f}}}).find("[0].scale") != std::string::npos); // > 2^24
    BOOST_TEST(message({.min_scale_schedule = {{0, NAN}}}).find("[0].scale") != std::string::npos);
    BOOST_TEST(message({.dynamic = false, .min_scale_schedule = {{0, 2}}}).find("dynamic") != std::string::npos);
    std::vector<MinScaleStep> long_schedule(max_min_scale_steps + 1);
    for (std::size_t i = 0; i < long_schedule.size(); ++i) long_schedule[i] = {std::int64_t(i), 1.0f};
    BOOST_TEST(message({.min_scale_schedule = long_schedule}).find("more than 1024") != std::string::npos);
}

// Growth never produces infinity or exceeds max_scale; backoff never goes below min_scale.
BOOST_AUTO_TEST_CASE(bounds_hold_under_random_sequences) {
    std::mt19937 gen(3);
    for (auto name : loss_scale_preset_names()) {
        LossScaleOptions o = loss_scale_preset(name);
        o.growth_interval = 3;
        o.at_min_scale = AtMinScale::keep_going;
        LossScale s(o);
        std::bernoulli_distribution overflow(0.3);
        for (int i = 0; i < 20000; ++i) {
            s.update(!overflow(gen));
            BOOST_TEST_REQUIRE(std::isfinite(s.scale()));
            if (o.rule != ScaleRule::keras) { // Keras 3 has no floor and no cap, by design
                BOOST_TEST_REQUIRE(s.scale() <= o.max_scale);
                BOOST_TEST_REQUIRE(s.scale() >= std::min(o.min_scale, o.initial_scale));
            }
        }
    }
}

// The guard, for every rule and the most hostile options validation accepts (no floor, the smallest
// backoff and the largest growth factors, no cap, a rescale every step, scales at the float32 limits):
// the scale stays finite and ≥ 2^-126 through long runs of overflows, of clean steps and of both mixed.
BOOST_AUTO_TEST_CASE(the_guard_holds_for_every_rule_and_option) {
    std::mt19937 gen(11);
    for (auto name : loss_scale_preset_names())
        for (float initial : {0x1p-126f, 1.0f, 0x1p127f})
            for (float backoff : {0.5f, 1e-30f}) {
                LossScaleOptions o = loss_scale_preset(name);
                o.dynamic = true;
                o.initial_scale = initial;
                o.min_scale = 0;
                o.max_scale = INFINITY;
                o.growth_interval = 1;
                o.hysteresis = 1;
                o.growth_factor = 1e30f;
                o.backoff_factor = o.rule == ScaleRule::mindspore ? 1 / o.growth_factor : backoff; // one factor
                o.overflow_tolerance = 0;
                o.decrease_every = 1;
                o.at_min_scale = AtMinScale::keep_going;
                LossScale s(o);
                const auto holds = [&](const char* phase, int i) {
                    BOOST_TEST_REQUIRE((std::isfinite(s.scale()) && s.scale() >= 0x1p-126f),
                                       name << ", initial " << initial << ", backoff " << backoff << ": " << phase
                                            << " step " << i << " left the scale at " << s.scale());
                };
                for (int i = 0; i < 400; ++i) s.update(false), holds("overflow", i);
                for (int i = 0; i < 400; ++i) s.update(true), holds("clean", i);
                std::bernoulli_distribution overflow(0.5);
                for (int i = 0; i < 4000; ++i) s.update(!overflow(gen)), holds("mixed", i);
            }
}

// ---- A second implementation of every rule, transcribed from each library's pseudo-code in its own
// ---- shape (research §3), driven with the production class through long random overflow sequences.
// ---- `up` and `down` add mixprec's one guard (the scale stays finite and ≥ 2^-126) where a library
// ---- would multiply without it.
namespace reference {

float up(float s, float g) { return std::isfinite(s * g) ? s * g : s; }
float down(float s, float b) { return std::max(s * b, 0x1p-126f); }

struct keras3 {
    float s;
    long N, c = 0;
    void step(bool finite) {
        if (finite) {
            if (c == N - 1) {
                s = up(s, 2);
                c = 0;
            } else
                c += 1;
        } else {
            c = 0;
            s = down(s, 0.5f);
        }
    }
};
struct tf2 {
    float s;
    long N, c = 0;
    void step(bool finite) {
        if (finite) {
            if (c + 1 >= N) {
                if (std::isfinite(s * 2)) s = s * 2;
                c = 0;
            } else
                c += 1;
        } else {
            c = 0;
            s = std::max(s / 2, 1.0f);
        }
    }
};
struct torch {
    float s, growth, backoff;
    long N, c = 0;
    void step(bool found_inf_is_zero) {
        if (!found_inf_is_zero) {
            s = down(s, backoff);
            c = 0;
        } else {
            c += 1;
            if (c == N) {
                float t = s * growth;
                if (std::isfinite(t)) s = t;
                c = 0;
            }
        }
    }
};
struct deepspeed {
    float s, min;
    long window, delayed_shift, cur_hyst, cur_iter = 0, last_overflow_iter = -1;
    bool consecutive;
    void step(bool finite) {
        if (!finite) {
            if (delayed_shift == 1 || cur_hyst == 1)
                s = std::max(s / 2, min);
            else
                cur_hyst -= 1;
            last_overflow_iter = cur_iter;
        } else {
            if (consecutive) cur_hyst = delayed_shift;
            long stable = (cur_iter - last_overflow_iter) - 1;
            if (stable > 0 && stable % window == 0) {
                if (!consecutive) cur_hyst = delayed_shift;
                s = up(s, 2);
            }
        }
        cur_iter += 1;
    }
};
struct megatron {
    float s, min, growth, backoff;
    long interval, hysteresis, c = 0, h;
    void step(bool found_inf) {
        if (found_inf) {
            c = 0;
            h -= 1;
            if (h <= 0) s = std::max(s * backoff, min);
        } else {
            c += 1;
            if (c == interval) {
                c = 0;
                h = hysteresis;
                s = up(s, growth);
            }
        }
    }
};
struct cerebras {
    float s, min, max;
    long steps_per_increase;
    double tol;
    long steps = 0, overflows = 0;
    void step(bool finite) {
        steps += 1;
        overflows += finite ? 0 : 1;
        if (double(overflows) / double(steps) > tol) {
            s /= 2;
            steps = overflows = 0;
        }
        if (steps > steps_per_increase) {
            s = up(s, 2);
            steps = overflows = 0;
        }
        s = std::clamp(s, min, max);
    }
};
struct ascend {
    float s, incr, decr;
    long incr_n, decr_n, good = 0, bad = 0;
    void step(bool finite) {
        if (finite) {
            if (good + 1 >= incr_n) {
                if (s < 3.4e38f / incr) s = s * incr;
                good = bad = 0;
            } else
                good += 1;
        } else {
            if (bad + 1 >= decr_n) {
                s = std::max(1.0f, s * decr);
                good = bad = 0;
            } else {
                bad += 1;
                good = 0;
            }
        }
    }
};
/// Apex's fused hysteresis kernel: the rule mixprec follows (plus its floor and cap).
struct apex_hysteresis {
    float s, growth, backoff, min, max;
    long interval, hysteresis, c = 0, h;
    void step(bool found_inf) {
        if (found_inf) {
            h -= 1;
            if (h > 0) {
                c = 0;
                return;
            }
        }
        if (found_inf) {
            s = std::max(s * backoff, min);
            c = 0;
        } else {
            c += 1;
            if (c == interval) {
                float t = s * growth;
                if (std::isfinite(t) && t <= max) s = t;
                c = 0;
            }
        }
        if (!found_inf) h = hysteresis;
    }
};

} // namespace reference

BOOST_AUTO_TEST_CASE(random_sequences_match_the_reference_rules) {
    std::mt19937 gen(20261122);
    for (double p : {0.02, 0.2, 0.6}) {
        std::bernoulli_distribution overflow(p);
        for (long n : {1L, 3L, 7L}) {
            const float init = 1024.0f;
            LossScale k(LossScaleOptions{.rule = ScaleRule::keras,
                                         .initial_scale = init,
                                         .growth_interval = n,
                                         .min_scale = 0,
                                         .max_scale = INFINITY});
            reference::keras3 rk{init, n};
            LossScale t(LossScaleOptions{
                .rule = ScaleRule::tf_keras, .initial_scale = init, .growth_interval = n, .max_scale = INFINITY});
            reference::tf2 rt{init, n};
            LossScale py(LossScaleOptions{.rule = ScaleRule::pytorch,
                                          .initial_scale = init,
                                          .growth_interval = n,
                                          .growth_factor = 4,
                                          .backoff_factor = 0.25f,
                                          .min_scale = 0,
                                          .max_scale = INFINITY});
            reference::torch rp{init, 4, 0.25f, n};
            LossScale ds(LossScaleOptions{.rule = ScaleRule::deepspeed,
                                          .initial_scale = init,
                                          .growth_interval = n,
                                          .hysteresis = 3,
                                          .min_scale = 1,
                                          .max_scale = INFINITY});
            reference::deepspeed rd{init, 1, n, 3, 3, 0, -1, false};
            LossScale dc(LossScaleOptions{.rule = ScaleRule::deepspeed,
                                          .initial_scale = init,
                                          .growth_interval = n,
                                          .hysteresis = 2,
                                          .consecutive_hysteresis = true,
                                          .min_scale = 1,
                                          .max_scale = INFINITY});
            reference::deepspeed rdc{init, 1, n, 2, 2, 0, -1, true};
            LossScale mg(LossScaleOptions{.rule = ScaleRule::megatron,
                                          .initial_scale = init,
                                          .growth_interval = n,
                                          .hysteresis = 2,
                                          .min_scale = 1,
                                          .max_scale = INFINITY});
            reference::megatron rm{init, 1, 2, 0.5f, n, 2, 0, 2};
            LossScale cb(LossScaleOptions{.rule = ScaleRule::cerebras,
                                          .initial_scale = init,
                                          .growth_interval = n,
                                          .min_scale = 0x1p-14f,
                                          .max_scale = 32768,
                                          .overflow_tolerance = 0.3});
            reference::cerebras rc{init, 0x1p-14f, 32768, n, 0.3};
            LossScale as(LossScaleOptions{.rule = ScaleRule::ascend,
                                          .initial_scale = init,
                                          .growth_interval = n,
                                          .backoff_factor = 0.8f,
                                          .max_scale = INFINITY,
                                          .decrease_every = 2});
            reference::ascend ra{init, 2, 0.8f, n, 2};
            LossScale mx(LossScaleOptions{.initial_scale = init, .growth_interval = n, .hysteresis = 2});
            reference::apex_hysteresis rx{init, 2, 0.5f, 1, 16777216.0f, n, 2, 0, 2};
            for (int i = 0; i < 5000; ++i) {
                const bool finite = !overflow(gen);
                k.update(finite), rk.step(finite);
                t.update(finite), rt.step(finite);
                py.update(finite), rp.step(finite);
                ds.update(finite), rd.step(finite);
                dc.update(finite), rdc.step(finite);
                mg.update(finite), rm.step(!finite);
                cb.update(finite), rc.step(finite);
                as.update(finite), ra.step(finite);
                mx.update(finite), rx.step(!finite);
                BOOST_TEST_REQUIRE(k.scale() == rk.s, "keras step " << i);
                BOOST_TEST_REQUIRE(t.scale() == rt.s, "tf_keras step " << i);
                BOOST_TEST_REQUIRE(py.scale() == rp.s, "pytorch step " << i);
                BOOST_TEST_REQUIRE(ds.scale() == rd.s, "deepspeed step " << i);
                BOOST_TEST_REQUIRE(dc.scale() == rdc.s, "deepspeed consecutive step " << i);
                BOOST_TEST_REQUIRE(mg.scale() == rm.s, "megatron step " << i);
                BOOST_TEST_REQUIRE(cb.scale() == rc.s, "cerebras step " << i);
                BOOST_TEST_REQUIRE(as.scale() == ra.s, "ascend step " << i);
                BOOST_TEST_REQUIRE(mx.scale() == rx.s, "mixprec step " << i);
            }
        }
    }
}
