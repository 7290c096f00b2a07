#pragma once
/// Checkpoint files: everything a training run needs to continue as if it had never stopped — the
/// float32 masters (working copies are derived from them), every optimizer slot and counter, the loss
/// scaler's options and state, the learning-rate schedule's position (the optimizer's iteration count),
/// and optionally the TrainingState (position in the data, running sums, random generators).
///
///   models::save_checkpoint("run.ckpt", model, opt, &state, {.keep_last = 3});
///   models::load_checkpoint("run.ckpt", model, opt, &state);   // same model, optimizer kind and policy
///
/// File layout (all integers little-endian):
///
///   offset 0    8 bytes   magic "MXPCKPT\n"
///   offset 8    uint32    format version (checkpoint_format_version)
///   offset 12   uint64    body length B
///   offset 20   B bytes   body: a cereal PortableBinary archive (header, masters, optimizer, training state,
///                         measured choices)
///   offset 20+B uint32    CRC-32C of every byte before it
///
/// The body begins with a small header (CheckpointInfo: mixprec version, policy, optimizer kind, variable
/// names, shapes and trainable flags) that read_checkpoint_info returns without touching a model. The
/// optimizer is saved as Optimizer::state(variables) gives it for all the variables (its slots numbered
/// among all of them, trainable or frozen) and restored by Optimizer::load_state, whatever optimizer it is.
/// The body ends with the measured modes' choices in force in the process (autodiff::measured_choice_list,
/// tensor/measured.hpp): loading adopts them, so that a run resumed with a measured mode takes the routes
/// the saved run took, and computes the same bits.
///
/// Writing is atomic: the file is written to "<path>.tmp" in the same directory, flushed to disk (fsync of
/// the file, then of the directory) and renamed over `path`; a crash at any moment leaves the old file or
/// the new one, never a mix. Two saves to the same path must not run at the same time.
///
/// Loading checks before it allocates or changes anything: the file's size (at most max_checkpoint_bytes),
/// magic, version and checksum first, then the header (every count and size in it against the bytes that
/// are left) and its variables and policy against the model given, then the rest of the body (every count
/// and size against the bytes that are left), then the optimizer and training state against those given.
/// The model, optimizer and state are changed only once all of it has passed; any problem is a
/// checkpoint_error saying what is wrong.

#include <mixprec/models/io/training_state.hpp>

#include <mixprec/amp/loss_scale.hpp>
#include <mixprec/autodiff/tensor/shape.hpp>
#include <mixprec/autodiff/variable.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models {

/// A checkpoint that cannot be written, read or applied: the message says what and why.
class checkpoint_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// The format this version of mixprec writes, and the newest it reads. Every older format is read too:
///   1  mixprec 0.1.0
///   2  mixprec 0.2.0: every struct carries a version of its own; the optimizer is saved as
///      Optimizer::state() gives it, a LossScaleOptimizer's scale and counters among its named values
///   3  mixprec 0.4.0: the optimizer's slots are numbered among all the variables (format 2 numbered them
///      among the trainable ones); the trainable flags are restored on load
///   4  the release after mixprec 0.4.0: the measured modes' choices at the end of the body, adopted on load
inline constexpr std::uint32_t checkpoint_format_version = 4;
/// Larger files are refused before they are read.
inline constexpr std::uint64_t max_checkpoint_bytes = std::uint64_t{4} << 30; // 4 GiB

/// One variable as the checkpoint describes it.
struct VariableInfo {
    std::string name;
    autodiff::Shape shape;
    bool trainable = true;
    friend bool operator==(const VariableInfo&, const VariableInfo&) = default;
};

/// The readable header of a checkpoint.
struct CheckpointInfo {
    std::uint32_t format_version = checkpoint_format_version;
    std::string mixprec_version; ///< of the program that wrote it, "0.2.0"
    std::string policy;          ///< "float32", "mixed_float16", ...
    std::string optimizer_kind;  ///< Optimizer::kind(): "sgd", "adam", "loss_scale(adam)", ...
    std::int64_t iterations = 0; ///< applied optimizer steps (the schedule's position)
    bool has_training_state = false;
    std::int64_t epoch = 0; ///< TrainingState::epoch (0 without a training state)
    std::int64_t step = 0;  ///< TrainingState::step (0 without a training state)
    std::vector<VariableInfo> variables;

    /// A few lines for people: "mixprec checkpoint, format 2, written by mixprec 0.2.0\n  policy ...".
    std::string to_string() const;
    friend bool operator==(const CheckpointInfo&, const CheckpointInfo&) = default;
};

/// Options of save_checkpoint.
struct SaveOptions {
    /// Checkpoints to keep (≥ 1). With K > 1, the previous files are kept as "<path>.1" (newest) up to
    /// "<path>.<K-1>" (oldest): before the new file replaces `path`, "<path>.<i>" is renamed to
    /// "<path>.<i+1>" for i = K-2 … 1 and the current `path` is hard-linked (copied where links are not
    /// supported) to "<path>.1", so `path` itself is never missing. Files numbered K or more are left alone.
    std::size_t keep_last = 1;
};

/// Writes a checkpoint of `variables` (all of them: names, shapes, trainable flags, float32 masters),
/// computed under dtype policy `policy`, with `optimizer` and, if given, `state`. The optimizer may have
/// been applied to any of `variables` (those trainable at each step, as Sequential::trainable_variables()
/// gives them; a variable frozen now keeps its slots). Atomic, as the file comment says.
/// std::invalid_argument for keep_last == 0 or an optimizer that has slots for a variable not among
/// `variables` (naming it); checkpoint_error naming the path and the system's reason when the file cannot
/// be written (the previous file is then left as it was, and no temporary file remains).
void save_checkpoint(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                     std::string_view policy, const optim::Optimizer& optimizer, const TrainingState* state = nullptr,
                     SaveOptions options = {});

/// Restores `variables`, `optimizer` and, if given, `state` from the checkpoint at `path`. The checkpoint
/// must have been written for the same variables (names and shapes, in order), under the same policy, for
/// an optimizer of the same kind, and must hold a training state if `state` is given;
/// otherwise checkpoint_error says what differs: the first variable that differs, by position, with its
/// name and shape on both sides (and both variable counts when they differ, naming the first variable
/// that only one side has); both policies; both optimizer kinds. The variables are compared with the
/// header before any value is read, so a checkpoint of another model is never refused for its size.
/// Also checkpoint_error for a file that is missing, unreadable, larger than max_checkpoint_bytes, of a
/// newer format version, damaged (checksum) or malformed. On any error nothing is changed (see
/// Optimizer::load_state for the one exception: an unbuilt optimizer may be left built with zero slots).
/// Each variable's trainable flag is set as the checkpoint has it, whatever it is in the model, so that a
/// run that froze layers resumes frozen; the optimizer gets slots for exactly the variables that had them.
/// Working copies are re-derived from the restored masters on their next read. The checkpoint's measured
/// choices are adopted (autodiff::adopt_measured_choices), in place of the process's for the same keys.
void load_checkpoint(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                     std::string_view policy, optim::Optimizer& optimizer, TrainingState* state = nullptr);

/// The header of the checkpoint at `path`, for messages such as "resuming from epoch 3, step 1250". The
/// file's size, magic, version and checksum are checked as load_checkpoint does; only the header is
/// parsed. checkpoint_error as load_checkpoint for files that are missing, unreadable or damaged.
CheckpointInfo read_checkpoint_info(const std::filesystem::path& path);

/// The bytes save_checkpoint would write (same arguments and errors, without the file).
std::vector<std::uint8_t> checkpoint_bytes(const std::vector<autodiff::Variable>& variables, std::string_view policy,
                                           const optim::Optimizer& optimizer, const TrainingState* state = nullptr);
/// load_checkpoint from bytes in memory (same checks, errors and guarantees).
void load_checkpoint_bytes(std::span<const std::uint8_t> bytes, const std::vector<autodiff::Variable>& variables,
                           std::string_view policy, optim::Optimizer& optimizer, TrainingState* state = nullptr);
/// read_checkpoint_info from bytes in memory.
CheckpointInfo read_checkpoint_info(std::span<const std::uint8_t> bytes);

} // namespace mixprec::models
