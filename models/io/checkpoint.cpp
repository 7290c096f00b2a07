#include <mixprec/models/io/checkpoint.hpp>

#include <mixprec/models/io/crc32c.hpp>
#include <mixprec/models/io/detail/bytes.hpp>
#include <mixprec/models/io/files.hpp>
#include <mixprec/models/io/serialization.hpp>

#include <mixprec/autodiff/tensor/measured.hpp>

#include <mixprec/version.hpp>

#include <cereal/archives/portable_binary.hpp>

#include <algorithm>
#include <array>
#include <functional>
#include <istream>
#include <ostream>
#include <streambuf>
#include <utility>

namespace mixprec::models {
namespace {

using autodiff::Variable;
using detail::in_quotes;

constexpr std::array<std::uint8_t, 8> magic = {'M', 'X', 'P', 'C', 'K', 'P', 'T', '\n'};
constexpr std::size_t prefix_bytes = 20; // magic, version, body length
constexpr std::size_t crc_bytes = 4;

[[noreturn]] void fail(const std::string& message) { throw checkpoint_error(message); }

std::string hex(std::uint32_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s = "0x";
    for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xF];
    return s;
}

template <class T>
void put_le(std::vector<std::uint8_t>& out, std::size_t at, T value) {
    for (std::size_t i = 0; i < sizeof(T); ++i) out[at + i] = static_cast<std::uint8_t>(value >> (8 * i));
}
template <class T>
T get_le(std::span<const std::uint8_t> in, std::size_t at) {
    T v = 0;
    for (std::size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | in[at + i]);
    return v;
}

// ---- streams over memory ----

/// Appends everything written to a byte vector.
class VectorSink final : public std::streambuf {
  public:
    explicit VectorSink(std::vector<std::uint8_t>& out) : out_(out) {}

  protected:
    std::streamsize xsputn(const char* s, std::streamsize n) override {
        out_.insert(out_.end(), reinterpret_cast<const std::uint8_t*>(s), reinterpret_cast<const std::uint8_t*>(s) + n);
        return n;
    }
    int_type overflow(int_type c) override {
        if (!traits_type::eq_int_type(c, traits_type::eof())) out_.push_back(static_cast<std::uint8_t>(c));
        return traits_type::not_eof(c);
    }

  private:
    std::vector<std::uint8_t>& out_;
};

/// Reads from bytes in memory and says how many are left.
class MemorySource final : public std::streambuf {
  public:
    explicit MemorySource(std::span<const std::uint8_t> bytes) {
        // The get area is only read; std::streambuf merely declares it non-const.
        char* begin = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));
        setg(begin, begin, begin + bytes.size());
    }
    std::size_t left() const { return static_cast<std::size_t>(egptr() - gptr()); }
};

/// A PortableBinary input archive of a checkpoint's body: its loads check every length against the
/// bytes left, and read the structs as the file's format wrote them.
class BodyArchive final : public cereal::PortableBinaryInputArchive,
                          public serialization::ByteBudget,
                          public serialization::ArchiveFormat {
  public:
    BodyArchive(std::istream& in, const MemorySource& source, std::uint32_t format_version)
        : cereal::PortableBinaryInputArchive(in), source_(source), format_version_(format_version) {}
    std::size_t bytes_left() const override { return source_.left(); }
    std::uint32_t format_version() const override { return format_version_; }

  private:
    const MemorySource& source_;
    std::uint32_t format_version_;
};

// ---- the body ----

struct Body {
    CheckpointInfo info;
    std::vector<std::vector<float>> masters;
    optim::OptimizerState optimizer;
    std::optional<TrainingState> state;
    std::vector<autodiff::MeasuredChoice> choices; // format 4 on
};

/// Formats 1 and 2 numbered the optimizer's slots among the variables that were trainable when the file was
/// written; renumbers them among all the variables, as format 3 numbers them.
void number_among_all(optim::OptimizerState& optimizer, const std::vector<VariableInfo>& variables) {
    std::vector<std::uint64_t> trainable; // position among all of each trainable variable
    for (std::size_t i = 0; i < variables.size(); ++i)
        if (variables[i].trainable) trainable.push_back(i);
    for (optim::SlotState& slot : optimizer.slots) {
        if (slot.variable >= trainable.size())
            fail("the optimizer's slot " + in_quotes(slot.name) + " of trainable variable " +
                 std::to_string(slot.variable) + ": the checkpoint has " + std::to_string(trainable.size()) +
                 " trainable variables");
        slot.variable = trainable[slot.variable];
    }
}

std::vector<std::uint8_t> encode(const std::vector<Variable>& variables, std::string_view policy,
                                 const optim::Optimizer& optimizer, const TrainingState* state) {
    optim::OptimizerState saved;
    try {
        saved = optimizer.state(variables);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("save_checkpoint: the optimizer's slots do not fit the variables to "
                                                "save (was the optimizer applied to other variables?): ") +
                                    e.what());
    }

    CheckpointInfo info;
    info.mixprec_version = MIXPREC_VERSION_STRING;
    info.policy = std::string(policy);
    info.optimizer_kind = saved.kind;
    info.iterations = saved.iterations;
    info.has_training_state = state != nullptr;
    if (state) info.epoch = state->epoch, info.step = state->step;
    for (const Variable& v : variables) info.variables.push_back({v.name(), v.shape(), v.trainable()});

    std::vector<std::uint8_t> out(prefix_bytes, 0);
    std::copy(magic.begin(), magic.end(), out.begin());
    put_le<std::uint32_t>(out, 8, checkpoint_format_version);
    {
        VectorSink sink(out);
        std::ostream stream(&sink);
        cereal::PortableBinaryOutputArchive ar(stream);
        ar(info);
        for (const Variable& v : variables) {
            const auto values = v.value().data<float>();
            ar(static_cast<std::uint64_t>(values.size()));
            ar(cereal::binary_data(values.data(), values.size_bytes()));
        }
        ar(saved);
        if (state) ar(*state);
        const std::vector<autodiff::MeasuredChoice> choices = autodiff::measured_choice_list();
        ar(static_cast<std::uint64_t>(choices.size()));
        for (const autodiff::MeasuredChoice& c : choices) ar(c);
    }
    put_le<std::uint64_t>(out, 12, out.size() - prefix_bytes);
    const std::uint32_t crc = crc32c(out);
    out.resize(out.size() + crc_bytes);
    put_le<std::uint32_t>(out, out.size() - crc_bytes, crc);
    return out;
}

/// Checks the frame (size, magic, version, body length, checksum) and returns the format version.
std::uint32_t check_frame(std::span<const std::uint8_t> bytes) {
    if (bytes.size() < prefix_bytes + crc_bytes)
        fail(std::to_string(bytes.size()) + " bytes is too short for a checkpoint (at least " +
             std::to_string(prefix_bytes + crc_bytes) + ")");
    if (bytes.size() > max_checkpoint_bytes)
        fail(std::to_string(bytes.size()) + " bytes exceeds the limit of " + std::to_string(max_checkpoint_bytes));
    if (!std::equal(magic.begin(), magic.end(), bytes.begin())) fail("not a mixprec checkpoint (wrong magic bytes)");
    const auto version = get_le<std::uint32_t>(bytes, 8);
    if (version == 0) fail("invalid format version 0");
    if (version > checkpoint_format_version)
        fail("format version " + std::to_string(version) +
             " is newer than this mixprec (" MIXPREC_VERSION_STRING ") reads (up to " +
             std::to_string(checkpoint_format_version) + "); use a newer mixprec");
    const auto body = get_le<std::uint64_t>(bytes, 12);
    const std::size_t actual = bytes.size() - prefix_bytes - crc_bytes;
    if (body != actual)
        fail("the header announces a body of " + std::to_string(body) + " bytes, the file holds " +
             std::to_string(actual) + " (truncated or damaged)");
    const auto stored = get_le<std::uint32_t>(bytes, bytes.size() - crc_bytes);
    const std::uint32_t computed = crc32c(bytes.first(bytes.size() - crc_bytes));
    if (stored != computed)
        fail("checksum mismatch (stored " + hex(stored) + ", computed " + hex(computed) + "): the file is damaged");
    return version;
}

/// Parses a framed checkpoint (after check_frame); only the header when `header_only`. `check_header`, if
/// given, sees the header before anything after it is read.
Body decode(std::span<const std::uint8_t> bytes, std::uint32_t version, bool header_only,
            const std::function<void(const CheckpointInfo&)>& check_header = {}) {
    MemorySource source(bytes.subspan(prefix_bytes, bytes.size() - prefix_bytes - crc_bytes));
    std::istream stream(&source);
    Body body;
    try {
        BodyArchive ar(stream, source, version);
        ar(body.info);
        if (body.info.format_version != version)
            fail("the header says format version " + std::to_string(body.info.format_version) + ", the file " +
                 std::to_string(version));
        if (header_only) return body;
        if (check_header) check_header(body.info);
        for (const VariableInfo& v : body.info.variables) {
            std::vector<float> values;
            serialization::load_floats(ar, "values", "values of variable " + in_quotes(v.name), values,
                                       v.shape.elements());
            body.masters.push_back(std::move(values));
        }
        ar(body.optimizer);
        if (body.info.has_training_state) {
            TrainingState state;
            ar(state);
            body.state = state;
        }
        if (version >= 4) {
            // A choice takes at least 20 bytes: version, key length, name length.
            const std::uint64_t n =
                serialization::load_count(ar, "choice_count", "measured choice count", serialization::max_entries, 20);
            for (std::uint64_t i = 0; i < n; ++i) { // one by one: memory follows the data actually read
                autodiff::MeasuredChoice choice;
                ar(choice);
                if (const auto problem = autodiff::measured_choice_problem(choice))
                    fail("measured choice " + std::to_string(i) + ": " + *problem);
                body.choices.push_back(std::move(choice));
            }
        }
    } catch (const cereal::Exception& e) {
        fail(std::string("malformed body: ") + e.what());
    }
    if (source.left() != 0) fail("malformed body: " + std::to_string(source.left()) + " bytes left over after the end");
    const CheckpointInfo& info = body.info;
    if (body.optimizer.kind != info.optimizer_kind)
        fail("the header names optimizer " + in_quotes(info.optimizer_kind) + ", the body holds " +
             in_quotes(body.optimizer.kind));
    if (body.optimizer.iterations != info.iterations)
        fail("the header says " + std::to_string(info.iterations) + " iterations, the optimizer " +
             std::to_string(body.optimizer.iterations));
    if (body.state && (body.state->epoch != info.epoch || body.state->step != info.step))
        fail("the header says epoch " + std::to_string(info.epoch) + " step " + std::to_string(info.step) +
             ", the training state epoch " + std::to_string(body.state->epoch) + " step " +
             std::to_string(body.state->step));
    if (version < 3) number_among_all(body.optimizer, info.variables);
    return body;
}

std::string described(const VariableInfo& v) { return in_quotes(v.name) + " " + v.shape.to_string(); }
std::string described(const Variable& v) { return in_quotes(v.name()) + " " + v.shape().to_string(); }

/// Throws checkpoint_error unless the checkpoint was written for these variables under this policy.
void check_model(const CheckpointInfo& info, const std::vector<Variable>& variables, std::string_view policy) {
    // Pairwise, so that a different model is named by its first different variable, with both shapes.
    const std::size_t common = std::min(variables.size(), info.variables.size());
    const std::string counts = "the checkpoint holds " + std::to_string(info.variables.size()) +
                               " variables, the model has " + std::to_string(variables.size());
    const std::string count_note = info.variables.size() == variables.size() ? "" : " (" + counts + ")";
    for (std::size_t i = 0; i < common; ++i) {
        const VariableInfo& saved = info.variables[i];
        const Variable& v = variables[i];
        const std::string where = "variable " + std::to_string(i) + " ";
        if (saved.name != v.name())
            fail(where + "is " + described(saved) + " in the checkpoint, " + described(v) + " in the model" +
                 count_note + ": is it a checkpoint of another model?");
        if (saved.shape != v.shape())
            fail(where + in_quotes(v.name()) + " has shape " + saved.shape.to_string() + " in the checkpoint, " +
                 v.shape().to_string() + " in the model" + count_note);
    }
    if (info.variables.size() > common)
        fail(counts + ": variable " + std::to_string(common) + ", " + described(info.variables[common]) +
             ", is not in the model" + (variables.empty() ? " (is it built?)" : ""));
    if (variables.size() > common)
        fail(counts + ": variable " + std::to_string(common) + " of the model, " + described(variables[common]) +
             ", is not in the checkpoint");
    if (info.policy != policy)
        fail("the checkpoint was saved under policy " + in_quotes(info.policy) + ", the model uses " +
             in_quotes(policy));
}

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
    return read_file_bounded(path, max_checkpoint_bytes);
}

std::string at(const std::filesystem::path& path) { return "checkpoint " + in_quotes(path.string()) + ": "; }

void load_from(std::span<const std::uint8_t> bytes, const std::vector<Variable>& variables, std::string_view policy,
               optim::Optimizer& optimizer, TrainingState* state) {
    const std::uint32_t version = check_frame(bytes);
    // The header is compared with the model before any value is read: a checkpoint of another model is
    // named by its first different variable, never by a size that follows from it.
    const Body body =
        decode(bytes, version, false, [&](const CheckpointInfo& info) { check_model(info, variables, policy); });
    if (state && !body.state) fail("the checkpoint holds no training state");
    // Everything matched: now change things, the optimizer first (it checks before it changes anything, and
    // nothing after it can fail). Its slots are numbered among all the variables (decode renumbered older
    // formats'), so the trainable flags the model has now do not matter.
    try {
        optimizer.load_state(body.optimizer, variables);
    } catch (const std::invalid_argument& e) {
        fail(std::string("the optimizer's state does not fit: ") + e.what());
    }
    for (std::size_t i = 0; i < variables.size(); ++i) {
        Variable v = variables[i];
        v.assign(autodiff::Tensor::from_floats(v.shape(), body.masters[i]));
        v.set_trainable(body.info.variables[i].trainable); // a run that froze layers resumes frozen
    }
    if (state) *state = *body.state;
    autodiff::adopt_measured_choices(body.choices); // the routes the saved run took, for the same bits
}

} // namespace

// ---- public ----

std::string CheckpointInfo::to_string() const {
    std::size_t parameters = 0;
    for (const auto& v : variables) parameters += v.shape.elements();
    std::string s = "mixprec checkpoint, format " + std::to_string(format_version) + ", written by mixprec " +
                    mixprec_version + "\n";
    s += "  policy: " + policy + "\n";
    s += "  optimizer: " + optimizer_kind + ", " + std::to_string(iterations) + " steps applied\n";
    if (has_training_state)
        s += "  training: epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + "\n";
    else
        s += "  training: no state saved\n";
    s += "  variables: " + std::to_string(variables.size()) + " (" + std::to_string(parameters) + " parameters)\n";
    for (const auto& v : variables) {
        s += "    ";
        s += v.name;
        s += " ";
        s += v.shape.to_string();
        s += v.trainable ? "\n" : " (not trainable)\n";
    }
    return s;
}

std::vector<std::uint8_t> checkpoint_bytes(const std::vector<autodiff::Variable>& variables, std::string_view policy,
                                           const optim::Optimizer& optimizer, const TrainingState* state) {
    return encode(variables, policy, optimizer, state);
}

void load_checkpoint_bytes(std::span<const std::uint8_t> bytes, const std::vector<autodiff::Variable>& variables,
                           std::string_view policy, optim::Optimizer& optimizer, TrainingState* state) {
    detail::located<checkpoint_error>("checkpoint: ", [&] { load_from(bytes, variables, policy, optimizer, state); });
}

CheckpointInfo read_checkpoint_info(std::span<const std::uint8_t> bytes) {
    return detail::located<checkpoint_error>("checkpoint: ",
                                             [&] { return decode(bytes, check_frame(bytes), true).info; });
}

void save_checkpoint(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                     std::string_view policy, const optim::Optimizer& optimizer, const TrainingState* state,
                     SaveOptions options) {
    if (options.keep_last == 0) throw std::invalid_argument("save_checkpoint: keep_last must be ≥ 1, got 0");
    const std::vector<std::uint8_t> bytes = encode(variables, policy, optimizer, state);
    detail::located<checkpoint_error>(at(path), [&] { write_file_atomically(path, bytes, options.keep_last); });
}

void load_checkpoint(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                     std::string_view policy, optim::Optimizer& optimizer, TrainingState* state) {
    detail::located<checkpoint_error>(at(path),
                                      [&] { load_from(read_file(path), variables, policy, optimizer, state); });
}

CheckpointInfo read_checkpoint_info(const std::filesystem::path& path) {
    return detail::located<checkpoint_error>(at(path), [&] {
        const std::vector<std::uint8_t> bytes = read_file(path);
        return decode(bytes, check_frame(bytes), true).info;
    });
}

} // namespace mixprec::models
