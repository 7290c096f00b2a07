#define BOOST_TEST_MODULE rounding
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <vector>

using namespace mixprec::autodiff;

namespace {

constexpr Dtype narrow_formats[] = {Dtype::float16, Dtype::bfloat16, Dtype::cbfloat16, Dtype::float8_e4m3,
                                    Dtype::float8_e5m2};

struct restore_best_path {
    ~restore_best_path() { set_isa(max_isa()); }
};

/// The class of one value by the definition (rounding.hpp): from the value and what narrow() made of it.
RoundingStats reference_class(float x, Dtype to) {
    std::uint16_t bits = 0;
    narrow(&x, &bits, 1, to); // no recorder is active here
    float y = 0;
    widen(&bits, to, &y, 1);
    const auto smallest_normal = [&] {
        float v = 0;
        // the least positive normal: 2^(1 - bias), found as the first value whose exponent field is set
        const std::uint32_t man_bits = to == Dtype::float16       ? 10
                                       : to == Dtype::bfloat16    ? 7
                                       : to == Dtype::cbfloat16   ? 9
                                       : to == Dtype::float8_e4m3 ? 3
                                                                  : 2;
        const std::uint16_t code = std::uint16_t(1u << man_bits);
        widen(&code, to, &v, 1);
        return v;
    }();
    RoundingStats s;
    s.count = 1;
    if (!std::isfinite(x)) {
        s.nonfinite = 1;
        return s;
    }
    s.amax = std::fabs(x);
    if (x == 0)
        s.zeros = 1;
    else if (y == 0)
        s.underflow = 1;
    else if (!std::isfinite(y))
        s.overflow = 1;
    else if (std::fabs(y) < smallest_normal)
        s.subnormal = 1;
    return s;
}

/// Patterns around each threshold, a stride through all positive and negative floats, and specials.
std::vector<float> probe_values(Dtype to) {
    std::vector<float> v;
    const RoundingThresholds& t = rounding_thresholds(to);
    for (float edge : {t.underflow_max, t.normal_min, t.overflow_min})
        for (int d = -4; d <= 4; ++d) {
            const float x = std::bit_cast<float>(std::bit_cast<std::uint32_t>(edge) + std::uint32_t(d));
            v.push_back(x);
            v.push_back(-x);
        }
    for (std::uint64_t p = 0; p < (std::uint64_t{1} << 32); p += 65537)
        v.push_back(std::bit_cast<float>(std::uint32_t(p)));
    for (float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                    std::numeric_limits<float>::max()})
        v.push_back(x);
    return v;
}

} // namespace

BOOST_AUTO_TEST_CASE(float16_thresholds_are_the_round_to_nearest_even_boundaries) {
    const RoundingThresholds& t = rounding_thresholds(Dtype::float16);
    BOOST_TEST(t.underflow_max == std::ldexp(1.0f, -25));                      // half the least subnormal: a tie, to 0
    BOOST_TEST(t.normal_min == std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)); // the tie rounds to 2^-14
    BOOST_TEST(t.overflow_min == 65520.0f);                                    // 65504 + half an ulp: a tie, to inf
    const RoundingThresholds& f = rounding_thresholds(Dtype::float32);
    BOOST_TEST(f.underflow_max == 0.0f);
    BOOST_TEST(std::isinf(f.overflow_min));
}

BOOST_AUTO_TEST_CASE(classify_matches_the_definition_for_every_format_and_level) {
    const restore_best_path restore;
    for (Isa level : available_isas()) {
        set_isa(level);
        for (Dtype to : narrow_formats) {
            const std::vector<float> values = probe_values(to);
            RoundingStats want;
            for (float x : values) want += reference_class(x, to);
            const RoundingStats got = classify(values, to);
            BOOST_TEST((got == want), name_of(level) << " " << name_of(to) << ": underflow " << got.underflow << " vs "
                                                     << want.underflow << ", subnormal " << got.subnormal << " vs "
                                                     << want.subnormal << ", overflow " << got.overflow << " vs "
                                                     << want.overflow);
        }
    }
}

BOOST_AUTO_TEST_CASE(recording_counts_while_rounding_and_changes_no_bit) {
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> src(10'003); // not a multiple of a vector: the tails of fused kernels
    for (float& x : src) x = std::ldexp(normal(gen), int(gen() % 80) - 40); // 2^-40 .. 2^40: every class
    src[5] = std::numeric_limits<float>::infinity();
    src[6] = std::numeric_limits<float>::quiet_NaN();
    src[7] = 0;
    const restore_best_path restore;
    for (Isa level : available_isas()) {
        set_isa(level);
        for (Dtype to : narrow_formats)
            for (Overflow o : {Overflow::infinity, Overflow::saturate}) {
                std::vector<std::uint16_t> plain(src.size()), recorded(src.size());
                narrow(src.data(), plain.data(), src.size(), to, o);
                RoundingRecorder recorder;
                narrow(src.data(), recorded.data(), src.size(), to, o);
                BOOST_TEST(std::memcmp(plain.data(), recorded.data(), src.size() * size_of(to)) == 0);
                const RoundingStats got = recorder.total();
                BOOST_TEST((got == classify(src, to)), name_of(level) << " " << name_of(to));
                BOOST_TEST(got.count == src.size());
                if (to != Dtype::bfloat16) BOOST_TEST(got.underflow > 0); // bfloat16 reaches 2^-133
                BOOST_TEST(got.nonfinite == 2u);
                BOOST_TEST(got.zeros == 1u);
            }
    }
}

BOOST_AUTO_TEST_CASE(counts_are_the_same_at_every_level_and_thread_count) {
    std::vector<float> src(300'001);
    std::mt19937 gen(3);
    for (float& x : src) x = std::bit_cast<float>(std::uint32_t(gen()));
    const restore_best_path restore;
    std::optional<RoundingStats> first;
    for (Isa level : available_isas()) {
        set_isa(level);
        const Tensor t = Tensor::from_floats(Shape{src.size()}, src, Dtype::float16);
        RoundingRecorder recorder({.histogram = true});
        const Tensor again = Tensor::from_floats(Shape{src.size()}, src, Dtype::float16);
        const RoundingStats got = recorder.stats_of(again);
        BOOST_TEST(got.count == src.size());
        BOOST_TEST(got.exponent_histogram.size() == RoundingStats::histogram_bins);
        if (!first)
            first = got;
        else
            BOOST_TEST((got == *first), name_of(level));
    }
}

BOOST_AUTO_TEST_CASE(stats_of_a_tensor_are_the_latest_rounding_into_it) {
    const std::vector<float> tiny(4096, 1e-9f), big(4096, 1e5f), small(4096, 1.0f);
    Tensor t(Shape{4096}, Dtype::float16);
    RoundingRecorder recorder;
    narrow(tiny.data(), t.raw(), 4096, Dtype::float16); // all underflow ...
    narrow(big.data(), t.raw(), 2048, Dtype::float16);  // ... then the first half overflows
    RoundingStats s = recorder.stats_of(t);
    BOOST_TEST(s.count == 4096u);
    BOOST_TEST(s.overflow == 2048u);
    BOOST_TEST(s.underflow == 0u); // the whole first write was replaced where the second overlapped it
    BOOST_TEST(s.zeros == 2048u);  // the rest was measured from what is stored: zeros, nothing lost seen
    narrow(small.data(), static_cast<std::byte*>(t.raw()) + 2048 * 2, 2048, Dtype::float16);
    s = recorder.stats_of(t);
    BOOST_TEST(s.count == 4096u);
    BOOST_TEST(s.overflow == 2048u);
    BOOST_TEST(s.zeros == 0u);
    BOOST_TEST(s.amax == 1e5f);
    BOOST_TEST(recorder.total().count == 2u * 4096u);

    const Tensor f32 = Tensor::from_floats(Shape{3}, std::vector<float>{0.0f, 1e-40f, -3.0f});
    const RoundingStats m = recorder.stats_of(f32); // never rounded: measured
    BOOST_TEST(m.count == 3u);
    BOOST_TEST(m.zeros == 1u);
    BOOST_TEST(m.subnormal == 1u);
    BOOST_TEST(m.amax == 3.0f);
}

BOOST_AUTO_TEST_CASE(nested_recorders_hand_their_writes_on) {
    const std::vector<float> tiny(100, 1e-9f);
    Tensor t(Shape{100}, Dtype::float16);
    RoundingRecorder outer;
    BOOST_TEST(active_rounding_recorder() == &outer);
    {
        RoundingRecorder inner;
        BOOST_TEST(active_rounding_recorder() == &inner);
        narrow(tiny.data(), t.raw(), 100, Dtype::float16);
        BOOST_TEST(inner.stats_of(t).underflow == 100u);
    }
    BOOST_TEST(active_rounding_recorder() == &outer);
    BOOST_TEST(outer.stats_of(t).underflow == 100u);
    BOOST_TEST(outer.total().count == 100u);
}

BOOST_AUTO_TEST_CASE(no_recorder_no_counting) {
    BOOST_TEST(active_rounding_recorder() == nullptr);
    { RoundingRecorder r; }
    BOOST_TEST(active_rounding_recorder() == nullptr);
}

BOOST_AUTO_TEST_CASE(a_batch_records_its_parts_as_one_write) {
    std::mt19937 gen(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> src(3 * 2048 + 77);
    for (float& x : src) x = std::ldexp(normal(gen), int(gen() % 80) - 40); // every class
    src[9] = 0;
    src[10] = std::numeric_limits<float>::infinity();
    std::vector<std::uint16_t> plain(src.size());
    narrow(src.data(), plain.data(), src.size(), Dtype::float16);

    Tensor t(Shape{src.size()}, Dtype::float16);
    RoundingRecorder recorder({.histogram = true});
    {
        RoundingBatch batch(t);
        BOOST_TEST(batch.recorder() == &recorder);
        std::vector<std::thread> threads; // parts on several threads (one OpenMP thread number: one slot)
        for (std::size_t part = 0; part < 4; ++part)
            threads.emplace_back([&, part] {
                const std::size_t begin = src.size() * part / 4, end = src.size() * (part + 1) / 4;
                narrow(src.data() + begin, static_cast<std::uint16_t*>(t.raw()) + begin, end - begin, Dtype::float16,
                       batch);
            });
        for (std::thread& th : threads) th.join();
        BOOST_TEST(recorder.total().count == 0u); // recorded when the batch ends
    }
    BOOST_TEST(std::memcmp(plain.data(), t.raw(), t.nbytes()) == 0);
    const RoundingStats want = classify(src, Dtype::float16, /*histogram=*/true);
    BOOST_TEST((recorder.total() == want));
    BOOST_TEST((recorder.stats_of(t) == want));
    BOOST_TEST(want.underflow > 0u);
    BOOST_TEST(want.nonfinite == 1u);
}

BOOST_AUTO_TEST_CASE(a_batch_without_a_recorder_only_rounds) {
    const std::vector<float> src{1.0f, 1e-9f, 7e4f};
    std::vector<std::uint16_t> plain(3), batched(3);
    narrow(src.data(), plain.data(), 3, Dtype::float16);
    RoundingBatch batch(batched.data(), 6);
    BOOST_TEST(batch.recorder() == nullptr);
    narrow(src.data(), batched.data(), 3, Dtype::float16, batch);
    BOOST_TEST(plain == batched);
}
