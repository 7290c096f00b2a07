#pragma once
/// cereal serialization of mixprec's training state, for checkpoint files and for programs that keep
/// mixprec state in archives of their own:
///
///   #include <cereal/archives/portable_binary.hpp>
///   #include <mixprec/models/io/serialization.hpp>
///   cereal::PortableBinaryOutputArchive out(stream);
///   out(state, optimizer.state());             // TrainingState, optim::OptimizerState
///
/// Covered: autodiff::Rng, autodiff::MeasuredChoice, TrainingState, optim::StateValue, optim::SlotState,
/// optim::OptimizerState (a LossScaleOptimizer's scale and counters among its values), VariableInfo and
/// CheckpointInfo. Binary
/// archives (Binary, PortableBinary) and text archives (JSON, XML) both work; fields are named for the
/// text ones.
///
/// Every struct begins with its version (uint32, struct_version): a struct whose layout changes gets the
/// next version, and loading keeps reading every older one. Checkpoint format 1 wrote no versions: an
/// archive that says it reads format 1 (ArchiveFormat) has every struct at version 1.
///
/// The schema uses fixed-width integers only: counts and lengths are uint64, flags and enums uint8.
/// Loading never trusts a size field: strings are limited to max_text_bytes, counts to max_entries and
/// shapes to Shape's limits before anything is allocated; float arrays are read in bounded chunks, so a
/// lying length fails when the data runs out instead of allocating what it claims. An archive that
/// also derives from ByteBudget (as checkpoint files are read) has every length checked against the
/// bytes that are left. Bad values (a flag other than 0/1, an unknown enum value or version, a shape
/// over the limits) are a checkpoint_error naming the field; data that runs out is cereal::Exception.
///
/// Include this header from .cpp files only (it brings in cereal).

#include <mixprec/models/io/checkpoint.hpp>

#include <mixprec/amp/loss_scale_optimizer.hpp>
#include <mixprec/autodiff/tensor/errors.hpp>
#include <mixprec/autodiff/tensor/measured.hpp>
#include <mixprec/optim/optimizer_state.hpp>

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace mixprec::models::serialization {

/// Longest string (variable name, policy, optimizer kind, version) a load accepts.
inline constexpr std::uint64_t max_text_bytes = 4096;
/// Most entries (variables, slots) a list may have.
inline constexpr std::uint64_t max_entries = std::uint64_t{1} << 24;

/// Mixed into an input archive that knows how many bytes are left to read: loads then refuse any
/// length larger than what remains before allocating for it.
class ByteBudget {
  public:
    virtual ~ByteBudget() = default;
    virtual std::size_t bytes_left() const = 0;
};

/// The bytes left in `ar`, if it is a ByteBudget.
template <class Archive>
std::optional<std::size_t> bytes_left(const Archive& ar) {
    if (const auto* budget = dynamic_cast<const ByteBudget*>(&ar)) return budget->bytes_left();
    return std::nullopt;
}

/// Mixed into an input archive that reads a checkpoint of a known format (checkpoint_format_version).
class ArchiveFormat {
  public:
    virtual ~ArchiveFormat() = default;
    virtual std::uint32_t format_version() const = 0;
};

/// The version each struct is written at. Raise it when the struct's layout changes, and teach its load
/// to read every older version.
template <class T>
inline constexpr std::uint32_t struct_version = 1;
/// 2: extra state as named values (StateValue) instead of an optional amp::LossScaleSnapshot.
template <>
inline constexpr std::uint32_t struct_version<optim::OptimizerState> = 2;

/// Whether `Archive` is a text archive (JSON, XML), which stores strings and arrays its own way.
template <class Archive>
inline constexpr bool is_text = cereal::traits::is_text_archive<Archive>::value;

/// Throws checkpoint_error "<what>: <why>".
[[noreturn]] inline void bad_field(const std::string& what, const std::string& why) {
    std::string message = what;
    message += ": ";
    message += why;
    throw checkpoint_error(message);
}

/// Writes struct_version<T>, the version a struct of type T begins with.
template <class T, class Archive>
void save_version(Archive& ar) {
    ar(cereal::make_nvp("version", struct_version<T>));
}
/// Reads the version a struct of type T begins with: 1 without reading anything for an archive of
/// checkpoint format 1; checkpoint_error naming `what` for 0 or a version newer than struct_version<T>.
template <class T, class Archive>
std::uint32_t load_version(Archive& ar, const char* what) {
    if (const auto* format = dynamic_cast<const ArchiveFormat*>(&ar); format && format->format_version() < 2) return 1;
    std::uint32_t v = 0;
    ar(cereal::make_nvp("version", v));
    if (v == 0 || v > struct_version<T>)
        bad_field(std::string(what) + " version", std::to_string(v) + " is not one this mixprec reads (1 to " +
                                                      std::to_string(struct_version<T>) + ")");
    return v;
}

/// Reads a count (uint64) of entries that take at least `bytes_each` bytes each. checkpoint_error naming
/// `what` when it exceeds `limit` or, for a ByteBudget archive, when the entries cannot fit in the bytes left.
template <class Archive>
std::uint64_t load_count(Archive& ar, const char* name, const std::string& what, std::uint64_t limit,
                         std::uint64_t bytes_each) {
    std::uint64_t n = 0;
    ar(cereal::make_nvp(name, n));
    if (n > limit) bad_field(what, std::to_string(n) + " exceeds the limit of " + std::to_string(limit));
    if (const auto left = bytes_left(ar); left && bytes_each > 0 && n > *left / bytes_each)
        bad_field(what, std::to_string(n) + " entries of at least " + std::to_string(bytes_each) + " bytes, but only " +
                            std::to_string(*left) + " bytes are left");
    return n;
}

/// A bool as a uint8 0 or 1; loading anything else is a checkpoint_error naming the field.
template <class Archive>
void save_flag(Archive& ar, const char* name, bool value) {
    ar(cereal::make_nvp(name, static_cast<std::uint8_t>(value ? 1 : 0)));
}
template <class Archive>
bool load_flag(Archive& ar, const char* name) {
    std::uint8_t v = 0;
    ar(cereal::make_nvp(name, v));
    if (v > 1) bad_field(name, "flag must be 0 or 1, got " + std::to_string(v));
    return v == 1;
}

/// A string: uint64 length then the bytes (binary archives), the archive's own string (text archives).
/// Loading refuses more than max_text_bytes (checkpoint_error naming "<name> length").
template <class Archive>
void save_text(Archive& ar, const char* name, const std::string& s) {
    if constexpr (is_text<Archive>) {
        ar(cereal::make_nvp(name, s));
    } else {
        ar(cereal::make_nvp(name, static_cast<std::uint64_t>(s.size())));
        ar(cereal::binary_data(s.data(), s.size()));
    }
}
template <class Archive>
void load_text(Archive& ar, const char* name, std::string& s) {
    if constexpr (is_text<Archive>) {
        ar(cereal::make_nvp(name, s)); // the parsed document bounds it
        if (s.size() > max_text_bytes)
            bad_field(name, "text of " + std::to_string(s.size()) + " bytes exceeds " + std::to_string(max_text_bytes));
    } else {
        const std::uint64_t n = load_count(ar, name, std::string(name) + " length", max_text_bytes, 1);
        s.resize(n);
        ar(cereal::binary_data(s.data(), n));
    }
}

/// A float array: uint64 count then the values (binary archives), a list of numbers (text archives).
template <class Archive>
void save_floats(Archive& ar, const char* name, const std::vector<float>& v) {
    if constexpr (is_text<Archive>) {
        ar(cereal::make_nvp(name, v));
    } else {
        ar(cereal::make_nvp(name, static_cast<std::uint64_t>(v.size())));
        ar(cereal::binary_data(v.data(), v.size() * sizeof(float)));
    }
}
/// Reads a float array of at most Shape::max_elements values; with `expected`, exactly that many
/// (checkpoint_error naming `what` otherwise, before anything is read or allocated).
template <class Archive>
void load_floats(Archive& ar, const char* name, const std::string& what, std::vector<float>& v,
                 std::optional<std::uint64_t> expected = std::nullopt) {
    const auto check = [&](std::uint64_t n) {
        if (expected && n != *expected)
            bad_field(what, "holds " + std::to_string(n) + " values, expected " + std::to_string(*expected));
    };
    if constexpr (is_text<Archive>) {
        ar(cereal::make_nvp(name, v));
        check(v.size());
    } else {
        const std::uint64_t n = load_count(ar, name, what, autodiff::Shape::max_elements, sizeof(float));
        check(n);
        // In chunks: without a byte budget, a length that lies fails when the data runs out, having
        // allocated at most twice what was really there (plus one chunk).
        constexpr std::uint64_t chunk = std::uint64_t{1} << 16;
        v.clear();
        for (std::uint64_t done = 0; done < n;) {
            const std::uint64_t take = std::min(chunk, n - done);
            v.resize(done + take);
            ar(cereal::binary_data(v.data() + done, take * sizeof(float)));
            done += take;
        }
    }
}

/// A shape as rank then dimensions (uint64); loading checks the rank against Shape::max_rank before
/// reading the dimensions, and the element count against Shape::max_elements (overflow-safe).
template <class Archive>
void save_shape(Archive& ar, const autodiff::Shape& shape) {
    ar(cereal::make_nvp("rank", static_cast<std::uint64_t>(shape.rank())));
    for (std::size_t d : shape) ar(cereal::make_nvp("dim", static_cast<std::uint64_t>(d)));
}
template <class Archive>
autodiff::Shape load_shape(Archive& ar, const std::string& what) {
    std::uint64_t rank = 0;
    ar(cereal::make_nvp("rank", rank));
    if (rank > autodiff::Shape::max_rank)
        bad_field(what, "rank " + std::to_string(rank) + " exceeds the maximum rank " +
                            std::to_string(autodiff::Shape::max_rank));
    std::array<std::size_t, autodiff::Shape::max_rank> dims{};
    for (std::uint64_t i = 0; i < rank; ++i) {
        std::uint64_t d = 0;
        ar(cereal::make_nvp("dim", d));
        dims[i] = static_cast<std::size_t>(d);
    }
    try {
        return autodiff::Shape(std::span<const std::size_t>(dims.data(), static_cast<std::size_t>(rank)));
    } catch (const autodiff::shape_error& e) {
        bad_field(what, e.what());
    }
}

/// Checkpoint format 1 kept a LossScaleOptimizer's options, state and counters in this fixed layout after
/// the optimizer's slots; read only (later formats keep them as the optimizer's named values). Checks the
/// enums and flags; the other values are checked when the optimizer loads them.
template <class Archive>
amp::LossScaleSnapshot load_format1_loss_scale(Archive& ar) {
    amp::LossScaleSnapshot s;
    amp::LossScaleOptions& o = s.options;
    std::uint8_t rule = 0, at_min = 0;
    ar(cereal::make_nvp("rule", rule));
    const std::optional<amp::ScaleRule> known = amp::scale_rule_at(rule);
    if (!known) bad_field("loss scale rule", "unknown value " + std::to_string(rule));
    o.rule = *known;
    o.dynamic = load_flag(ar, "dynamic");
    float growth_factor = 0, backoff_factor = 0; // float32 in format 1
    ar(cereal::make_nvp("initial_scale", o.initial_scale), cereal::make_nvp("growth_interval", o.growth_interval),
       cereal::make_nvp("growth_factor", growth_factor), cereal::make_nvp("backoff_factor", backoff_factor),
       cereal::make_nvp("hysteresis", o.hysteresis));
    o.growth_factor = growth_factor;
    o.backoff_factor = backoff_factor;
    o.consecutive_hysteresis = load_flag(ar, "consecutive_hysteresis");
    ar(cereal::make_nvp("min_scale", o.min_scale), cereal::make_nvp("max_scale", o.max_scale),
       cereal::make_nvp("at_min_scale", at_min));
    if (at_min > static_cast<std::uint8_t>(amp::AtMinScale::raise))
        bad_field("loss scale at_min_scale", "unknown value " + std::to_string(at_min));
    o.at_min_scale = static_cast<amp::AtMinScale>(at_min);
    ar(cereal::make_nvp("overflow_tolerance", o.overflow_tolerance),
       cereal::make_nvp("decrease_every", o.decrease_every));
    amp::LossScaleState& t = s.state;
    ar(cereal::make_nvp("scale", t.scale), cereal::make_nvp("growth_counter", t.growth_counter),
       cereal::make_nvp("hysteresis_left", t.hysteresis_left), cereal::make_nvp("iteration", t.iteration),
       cereal::make_nvp("last_overflow", t.last_overflow), cereal::make_nvp("overflows_counted", t.overflows_counted),
       cereal::make_nvp("unclamped_scale", t.unclamped_scale), cereal::make_nvp("growths", t.growths),
       cereal::make_nvp("backoffs", t.backoffs));
    ar(cereal::make_nvp("skipped_steps", s.skipped_steps));
    s.last_step_skipped = load_flag(ar, "last_step_skipped");
    ar(cereal::make_nvp("last_gradient_norm", s.last_gradient_norm));
    return s;
}

} // namespace mixprec::models::serialization

// Non-member functions in namespace cereal: found for every cereal archive (argument-dependent lookup
// on the archive type) without adding names to mixprec's namespaces.
namespace cereal {

template <class Archive>
void save(Archive& ar, const mixprec::autodiff::Rng& rng) {
    mixprec::models::serialization::save_version<mixprec::autodiff::Rng>(ar);
    const auto& s = rng.state();
    ar(make_nvp("s0", s[0]), make_nvp("s1", s[1]), make_nvp("s2", s[2]), make_nvp("s3", s[3]));
}
template <class Archive>
void load(Archive& ar, mixprec::autodiff::Rng& rng) {
    mixprec::models::serialization::load_version<mixprec::autodiff::Rng>(ar, "random generator");
    std::array<std::uint64_t, 4> s{};
    ar(make_nvp("s0", s[0]), make_nvp("s1", s[1]), make_nvp("s2", s[2]), make_nvp("s3", s[3]));
    rng.set_state(s);
}

template <class Archive>
void save(Archive& ar, const mixprec::models::TrainingState& s) {
    mixprec::models::serialization::save_version<mixprec::models::TrainingState>(ar);
    ar(make_nvp("epoch", s.epoch), make_nvp("step", s.step), make_nvp("batch_in_epoch", s.batch_in_epoch),
       make_nvp("shuffle_rng", s.shuffle_rng), make_nvp("dropout_rng", s.dropout_rng), make_nvp("init_rng", s.init_rng),
       make_nvp("epoch_loss_sum", s.epoch_loss_sum), make_nvp("epoch_examples", s.epoch_examples),
       make_nvp("epoch_correct", s.epoch_correct));
}
template <class Archive>
void load(Archive& ar, mixprec::models::TrainingState& s) {
    mixprec::models::serialization::load_version<mixprec::models::TrainingState>(ar, "training state");
    ar(make_nvp("epoch", s.epoch), make_nvp("step", s.step), make_nvp("batch_in_epoch", s.batch_in_epoch),
       make_nvp("shuffle_rng", s.shuffle_rng), make_nvp("dropout_rng", s.dropout_rng), make_nvp("init_rng", s.init_rng),
       make_nvp("epoch_loss_sum", s.epoch_loss_sum), make_nvp("epoch_examples", s.epoch_examples),
       make_nvp("epoch_correct", s.epoch_correct));
}

template <class Archive>
void save(Archive& ar, const mixprec::optim::SlotState& s) {
    namespace ser = mixprec::models::serialization;
    ser::save_version<mixprec::optim::SlotState>(ar);
    ser::save_text(ar, "name", s.name);
    ar(make_nvp("variable", s.variable));
    ser::save_floats(ar, "values", s.values);
}
template <class Archive>
void load(Archive& ar, mixprec::optim::SlotState& s) {
    namespace ser = mixprec::models::serialization;
    ser::load_version<mixprec::optim::SlotState>(ar, "optimizer slot");
    ser::load_text(ar, "name", s.name);
    ar(make_nvp("variable", s.variable));
    ser::load_floats(ar, "values", "slot '" + s.name + "' values", s.values);
}

/// A value: name, kind (0 integer, 1 real), then the int64 or the double.
template <class Archive>
void save(Archive& ar, const mixprec::optim::StateValue& v) {
    namespace ser = mixprec::models::serialization;
    ser::save_version<mixprec::optim::StateValue>(ar);
    ser::save_text(ar, "name", v.name);
    ar(make_nvp("kind", static_cast<std::uint8_t>(v.value.index())));
    if (const auto* i = std::get_if<std::int64_t>(&v.value))
        ar(make_nvp("integer", *i));
    else
        ar(make_nvp("real", std::get<double>(v.value)));
}
template <class Archive>
void load(Archive& ar, mixprec::optim::StateValue& v) {
    namespace ser = mixprec::models::serialization;
    ser::load_version<mixprec::optim::StateValue>(ar, "optimizer value");
    ser::load_text(ar, "name", v.name);
    std::uint8_t kind = 0;
    ar(make_nvp("kind", kind));
    if (kind == 0) {
        std::int64_t i = 0;
        ar(make_nvp("integer", i));
        v.value = i;
    } else if (kind == 1) {
        double d = 0;
        ar(make_nvp("real", d));
        v.value = d;
    } else {
        ser::bad_field("optimizer value '" + v.name + "' kind",
                       "must be 0 (integer) or 1 (real), got " + std::to_string(kind));
    }
}

template <class Archive>
void save(Archive& ar, const mixprec::optim::OptimizerState& s) {
    namespace ser = mixprec::models::serialization;
    ser::save_version<mixprec::optim::OptimizerState>(ar);
    ser::save_text(ar, "kind", s.kind);
    ar(make_nvp("iterations", s.iterations));
    ser::save_flag(ar, "built", s.built);
    ar(make_nvp("slot_count", static_cast<std::uint64_t>(s.slots.size())));
    for (const auto& slot : s.slots) ar(make_nvp("slot", slot));
    ar(make_nvp("value_count", static_cast<std::uint64_t>(s.values.size())));
    for (const auto& value : s.values) ar(make_nvp("value", value));
}
/// Version 1 (checkpoint format 1) kept a LossScaleOptimizer's state as an optional LossScaleSnapshot
/// after the slots; it is read into the values that amp::loss_scale_values gives.
template <class Archive>
void load(Archive& ar, mixprec::optim::OptimizerState& s) {
    namespace ser = mixprec::models::serialization;
    const std::uint32_t version = ser::load_version<mixprec::optim::OptimizerState>(ar, "optimizer state");
    ser::load_text(ar, "kind", s.kind);
    ar(make_nvp("iterations", s.iterations));
    s.built = ser::load_flag(ar, "built");
    // A slot takes at least 24 bytes: name length, variable, value count.
    const std::uint64_t n = ser::load_count(ar, "slot_count", "optimizer slot count", ser::max_entries, 24);
    s.slots.clear();
    for (std::uint64_t i = 0; i < n; ++i) { // one by one: memory follows the data actually read
        mixprec::optim::SlotState slot;
        ar(make_nvp("slot", slot));
        s.slots.push_back(std::move(slot));
    }
    s.values.clear();
    if (version == 1) {
        if (ser::load_flag(ar, "has_loss_scale"))
            s.values = mixprec::amp::loss_scale_values(ser::load_format1_loss_scale(ar));
        return;
    }
    // A value takes at least 17 bytes: name length, kind, the number.
    const std::uint64_t m = ser::load_count(ar, "value_count", "optimizer value count", ser::max_entries, 17);
    for (std::uint64_t i = 0; i < m; ++i) {
        mixprec::optim::StateValue value;
        ar(make_nvp("value", value));
        s.values.push_back(std::move(value));
    }
}

template <class Archive>
void save(Archive& ar, const mixprec::autodiff::MeasuredChoice& c) {
    namespace ser = mixprec::models::serialization;
    ser::save_version<mixprec::autodiff::MeasuredChoice>(ar);
    ser::save_text(ar, "key", c.key);
    ser::save_text(ar, "chosen", c.chosen);
}
template <class Archive>
void load(Archive& ar, mixprec::autodiff::MeasuredChoice& c) {
    namespace ser = mixprec::models::serialization;
    ser::load_version<mixprec::autodiff::MeasuredChoice>(ar, "measured choice");
    ser::load_text(ar, "key", c.key);
    ser::load_text(ar, "chosen", c.chosen);
}

template <class Archive>
void save(Archive& ar, const mixprec::models::VariableInfo& v) {
    namespace ser = mixprec::models::serialization;
    ser::save_version<mixprec::models::VariableInfo>(ar);
    ser::save_text(ar, "name", v.name);
    ser::save_shape(ar, v.shape);
    ser::save_flag(ar, "trainable", v.trainable);
}
template <class Archive>
void load(Archive& ar, mixprec::models::VariableInfo& v) {
    namespace ser = mixprec::models::serialization;
    ser::load_version<mixprec::models::VariableInfo>(ar, "variable");
    ser::load_text(ar, "name", v.name);
    v.shape = ser::load_shape(ar, "variable '" + v.name + "'");
    v.trainable = ser::load_flag(ar, "trainable");
}

template <class Archive>
void save(Archive& ar, const mixprec::models::CheckpointInfo& c) {
    namespace ser = mixprec::models::serialization;
    ser::save_version<mixprec::models::CheckpointInfo>(ar);
    ar(make_nvp("format_version", c.format_version));
    ser::save_text(ar, "mixprec_version", c.mixprec_version);
    ser::save_text(ar, "policy", c.policy);
    ser::save_text(ar, "optimizer_kind", c.optimizer_kind);
    ar(make_nvp("iterations", c.iterations));
    ser::save_flag(ar, "has_training_state", c.has_training_state);
    ar(make_nvp("epoch", c.epoch), make_nvp("step", c.step));
    ar(make_nvp("variable_count", static_cast<std::uint64_t>(c.variables.size())));
    for (const auto& v : c.variables) ar(make_nvp("variable", v));
}
template <class Archive>
void load(Archive& ar, mixprec::models::CheckpointInfo& c) {
    namespace ser = mixprec::models::serialization;
    ser::load_version<mixprec::models::CheckpointInfo>(ar, "checkpoint header");
    ar(make_nvp("format_version", c.format_version));
    ser::load_text(ar, "mixprec_version", c.mixprec_version);
    ser::load_text(ar, "policy", c.policy);
    ser::load_text(ar, "optimizer_kind", c.optimizer_kind);
    ar(make_nvp("iterations", c.iterations));
    c.has_training_state = ser::load_flag(ar, "has_training_state");
    ar(make_nvp("epoch", c.epoch), make_nvp("step", c.step));
    // A variable takes at least 17 bytes: name length, rank, trainable flag (and a version from format 2).
    const std::uint64_t n = ser::load_count(ar, "variable_count", "variable count", ser::max_entries, 17);
    c.variables.clear();
    for (std::uint64_t i = 0; i < n; ++i) {
        mixprec::models::VariableInfo v;
        ar(make_nvp("variable", v));
        c.variables.push_back(std::move(v));
    }
}

} // namespace cereal
