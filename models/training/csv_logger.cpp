#include <mixprec/models/training/csv_logger.hpp>

#include <mixprec/models/training/callback.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace mixprec::models {

namespace {

/// Shortest round-trip digits of `value` (finite) laid out as Python's repr: fixed for exponents in
/// [-4, 16), scientific otherwise.
template <class T>
std::string repr(T value) {
    if (std::isnan(value)) return "nan";
    if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
    std::string_view text(buffer, result.ptr); // "-d.ddde-XX"
    std::string out;
    if (text.front() == '-') {
        out += '-';
        text.remove_prefix(1);
    }
    const std::size_t e = text.find('e');
    std::string digits(1, text[0]);
    if (e > 1) digits += text.substr(2, e - 2);
    const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
    const auto count = static_cast<int>(digits.size());
    if (exponent < -4 || exponent >= 16) {
        out += digits[0];
        if (count > 1) out += '.' + digits.substr(1);
        out += exponent < 0 ? "e-" : "e+";
        const int magnitude = std::abs(exponent);
        if (magnitude < 10) out += '0';
        out += std::to_string(magnitude);
    } else if (exponent < 0) {
        out += "0." + std::string(std::size_t(-exponent - 1), '0') + digits;
    } else if (count <= exponent + 1) {
        out += digits + std::string(std::size_t(exponent + 1 - count), '0') + ".0";
    } else {
        out += digits.substr(0, std::size_t(exponent + 1)) + '.' + digits.substr(std::size_t(exponent + 1));
    }
    return out;
}

} // namespace

std::string python_float_text(double value) { return repr(value); }
std::string python_float_text(float value) { return repr(value); }

CSVLogger::CSVLogger(std::filesystem::path path, char separator, bool append)
    : path_(std::move(path)), separator_(separator), append_(append) {
    if (separator == '"' || separator == '\n' || separator == '\r')
        throw std::invalid_argument("CSVLogger: separator must not be a quote or a line break");
}

void CSVLogger::open() {
    out_.close();
    std::error_code error;
    const bool has_content = append_ && std::filesystem::file_size(path_, error) > 0 && !error;
    out_.open(path_, append_ ? std::ios::app : std::ios::trunc);
    if (!out_) throw std::runtime_error("CSVLogger: cannot open " + path_.string() + " for writing");
    header_due_ = !has_content;
    columns_.clear();
}

void CSVLogger::on_train_begin(FitContext&) { open(); }

void CSVLogger::on_epoch_begin(FitContext&, std::int64_t) { step_rate_.reset(); }

void CSVLogger::on_step_end(FitContext&, const StepLogs& logs) { step_rate_ = logs.learning_rate; }

std::string CSVLogger::field(const std::string& text) const {
    if (text.find_first_of(std::string{separator_, '"', '\n', '\r'}) == std::string::npos) return text;
    std::string quoted = "\"";
    for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + '"';
}

void CSVLogger::on_epoch_end(FitContext& context, const EpochLogs& logs) {
    if (!out_.is_open()) open(); // driven without on_train_begin
    if (columns_.empty()) {
        columns_ = figure_names(logs);
        if (header_due_) {
            out_ << "epoch";
            for (const std::string& name : columns_) out_ << separator_ << field(name);
            out_ << separator_ << "learning_rate\n";
            header_due_ = false;
        }
    }
    out_ << logs.epoch;
    for (const std::string& name : columns_) {
        const std::optional<double> value = logs.get(name);
        out_ << separator_ << (value ? python_float_text(*value) : "NA");
    }
    out_ << separator_ << python_float_text(step_rate_.value_or(context.optimizer.current_learning_rate())) << '\n'
         << std::flush;
    if (!out_) throw std::runtime_error("CSVLogger: writing " + path_.string() + " failed");
}

void CSVLogger::on_train_end(FitContext&, bool) { out_.close(); }

} // namespace mixprec::models
