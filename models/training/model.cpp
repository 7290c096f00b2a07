// Model: tracking and naming layers, building, the forward pass, variables, the Keras-style summary table,
// and compile (see model.hpp).

#include <mixprec/models/training/model.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/models/layers/fp8_choice.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/fit.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <stdexcept>

namespace mixprec::models {
namespace {

/// Keras's snake_case of a class name: "Dense" → "dense", "Conv2D" → "conv2d",
/// "MaxPooling2D" → "max_pooling2d", "LayerNormalization" → "layer_normalization". As Keras, an
/// underscore goes before each capital that starts a capitalized word (when something precedes it) and
/// between a lowercase letter and a capital; then everything is lowercased.
std::string snake_case(const std::string& kind) {
    const auto upper = [](char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; };
    const auto lower = [](char c) { return std::islower(static_cast<unsigned char>(c)) != 0; };
    std::string out;
    for (std::size_t i = 0; i < kind.size(); ++i) {
        const char c = kind[i];
        const bool starts_word = i > 0 && upper(c) && i + 1 < kind.size() && lower(kind[i + 1]);
        const bool after_lower = i > 0 && upper(c) && lower(kind[i - 1]);
        if ((starts_word || after_lower) && out.back() != '_') out += '_';
        out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

/// "669,706".
std::string with_commas(std::size_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

/// Keras's readable size: "2.55 MB" (powers of 1024), "0.00 B".
std::string readable_bytes(double bytes) {
    static constexpr std::array<const char*, 6> units{"B", "KB", "MB", "GB", "TB", "PB"};
    std::size_t u = 0;
    while (bytes >= 1024.0 && u + 1 < units.size()) {
        bytes /= 1024.0;
        ++u;
    }
    char buffer[48];
    std::snprintf(buffer, sizeof buffer, "%.2f %s", bytes, units[u]);
    return buffer;
}

/// "(None, 32, 13, 13)": an example shape with the batch axis first; "(None,)" for a scalar example.
std::string batch_shape_string(const Shape& example) {
    std::string s = "(None";
    if (example.rank() == 0) s += ",";
    for (std::size_t d : example) {
        s += ", ";
        s += std::to_string(d);
    }
    s += ")";
    return s;
}

std::string repeat(const char* piece, std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += piece;
    return s;
}

/// "a=1, b=(2, 3), c=x" split after the commas that separate entries (not those inside parentheses) into
/// lines of at most `width` characters where possible, joined by '\n'.
std::string wrap_entries(const std::string& text, std::size_t width) {
    std::vector<std::string> entries(1);
    int depth = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
        if (c == ',' && depth == 0 && i + 1 < text.size() && text[i + 1] == ' ') {
            entries.back() += ',';
            entries.emplace_back();
            ++i; // the space
        } else {
            entries.back() += c;
        }
    }
    std::string out, line;
    for (const std::string& e : entries) {
        if (!line.empty() && line.size() + 1 + e.size() > width) {
            out += line;
            out += '\n';
            line.clear();
        }
        if (!line.empty()) line += ' ';
        line += e;
    }
    return out + line;
}

/// A table drawn with box characters as Keras (rich) draws it. Cells are ASCII, so widths are sizes; a
/// cell holding '\n' spans several lines of its row.
class BoxTable {
  public:
    BoxTable(std::vector<std::string> header, std::vector<bool> right_aligned)
        : header_(split(header)), right_(std::move(right_aligned)), width_(header.size()) {
        measure(header_);
    }

    void add_row(const std::vector<std::string>& row) {
        rows_.push_back(split(row));
        measure(rows_.back());
    }

    std::string render() const {
        std::string s = rule("┏", "━", "┳", "┓") + lines(header_, "┃", false) + rule("┡", "━", "╇", "┩");
        for (std::size_t r = 0; r < rows_.size(); ++r) {
            if (r > 0) s += rule("├", "─", "┼", "┤");
            s += lines(rows_[r], "│", true);
        }
        return s + rule("└", "─", "┴", "┘");
    }

  private:
    using Row = std::vector<std::vector<std::string>>; // per column, its lines

    static Row split(const std::vector<std::string>& cells) {
        Row row;
        for (const std::string& cell : cells) {
            std::vector<std::string> parts(1);
            for (char c : cell) {
                if (c == '\n')
                    parts.emplace_back();
                else
                    parts.back().push_back(c);
            }
            row.push_back(std::move(parts));
        }
        return row;
    }

    void measure(const Row& row) {
        for (std::size_t c = 0; c < row.size(); ++c)
            for (const std::string& part : row[c]) width_[c] = std::max(width_[c], part.size());
    }

    std::string rule(const char* left, const char* fill, const char* cross, const char* right) const {
        std::string s = left;
        for (std::size_t c = 0; c < width_.size(); ++c) {
            if (c > 0) s += cross;
            s += repeat(fill, width_[c] + 2);
        }
        return s + right + "\n";
    }

    std::string lines(const Row& row, const char* bar, bool align) const {
        std::size_t height = 0;
        for (const auto& cell : row) height = std::max(height, cell.size());
        std::string s;
        for (std::size_t k = 0; k < height; ++k) {
            for (std::size_t c = 0; c < width_.size(); ++c) {
                const std::string text = k < row[c].size() ? row[c][k] : std::string();
                const std::string pad(width_[c] - text.size(), ' ');
                s += bar;
                s += ' ';
                s += align && right_[c] ? pad + text : text + pad;
                s += ' ';
            }
            s += bar;
            s += '\n';
        }
        return s;
    }

    Row header_;
    std::vector<bool> right_;
    std::vector<std::size_t> width_;
    std::vector<Row> rows_;
};

} // namespace

Model::Model(std::string name) : name_(name.empty() ? "model" : std::move(name)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Layer& Model::track(std::unique_ptr<Layer> layer) {
    if (!layer) throw std::invalid_argument("model '" + name_ + "': the layer is null");
    if (built_) throw std::logic_error("model '" + name_ + "' is already built; add layers before build()");
    if (layer->built())
        throw std::logic_error("model '" + name_ + "': layer '" + layer->name() + "' (" + layer->kind() +
                               ") is already built; add unbuilt layers");
    const auto taken = [&](const std::string& name) {
        return std::any_of(layers_.begin(), layers_.end(), [&](const auto& l) { return l->name() == name; });
    };
    if (layer->name().empty()) {
        const std::string base = snake_case(layer->kind());
        std::string name = base;
        for (std::size_t k = 1; taken(name); ++k) name = base + "_" + std::to_string(k);
        layer->set_name(std::move(name));
    } else if (taken(layer->name())) {
        throw std::invalid_argument("model '" + name_ + "' already has a layer named '" + layer->name() + "'");
    }
    layers_.push_back(std::move(layer));
    return *layers_.back();
}

Layer& Model::layer(std::string_view name) const {
    std::string names;
    for (const auto& l : layers_) {
        if (l->name() == name) return *l;
        names += names.empty() ? "" : ", ";
        names += "'" + l->name() + "'";
    }
    throw std::invalid_argument("model '" + name_ + "' has no layer named '" + std::string(name) +
                                "'; its layers are " + (names.empty() ? "none" : names));
}

Shape Model::build_layers(const Shape& input_shape, Rng& init_rng) {
    BuildScope scope{init_rng, {}};
    for (const auto& l : layers_) scope.tracked.push_back(l.get());
    std::vector<std::size_t> dims{1};
    dims.insert(dims.end(), input_shape.begin(), input_shape.end());
    const Tensor y = call(Tensor(Shape(std::span<const std::size_t>(dims))), CallContext{.building = &scope});
    if (y.rank() == 0)
        throw autodiff::shape_error("model '" + name_ + "': call() returned a scalar; return a batch (batch, ...)");
    return Shape(std::span<const std::size_t>(y.shape().begin() + 1, y.rank() - 1));
}

void Model::build(const Shape& input_shape, std::uint64_t seed) {
    if (built_) throw std::logic_error("model '" + name_ + "' is already built");
    if (layers_.empty())
        throw std::logic_error("model '" + name_ + "' has no layers; " +
                               (name_ == "sequential" ? "add layers first" : "create them with track()"));
    Rng rng(seed);
    output_shape_ = build_layers(input_shape, rng);
    for (const auto& l : layers_)
        if (!l->built())
            throw std::logic_error("model '" + name_ + "': layer '" + l->name() + "' (" + l->kind() +
                                   ") was never called while the model built, so it has no weights: call it in "
                                   "call(), passing the context on, or do not track it");
    // The first and last layers with products stay in the compute dtype under FP8 products, unless set
    // otherwise (fp8_choice.hpp).
    std::vector<Fp8Choice*> products;
    for (const auto& l : layers_)
        if (auto* p = dynamic_cast<Fp8Choice*>(l.get())) products.push_back(p);
    if (!products.empty()) {
        products.front()->set_edge(true);
        products.back()->set_edge(true);
    }
    input_shape_ = input_shape;
    built_ = true;
}

const Shape& Model::output_shape() const {
    if (!built_) throw std::logic_error("model '" + name_ + "': output_shape before build; call build() first");
    return output_shape_;
}

Tensor Model::operator()(const Tensor& x, const CallContext& context) {
    if (!built_) throw std::logic_error("model '" + name_ + "' is called before it is built; call build() first");
    Tensor y = call(x, context);
    return y.dtype() == autodiff::Dtype::float32 ? y : autodiff::cast(y, autodiff::Dtype::float32);
}

std::vector<Variable> Model::variables() const {
    std::vector<Variable> all;
    for (const auto& layer : layers_)
        for (Variable& v : layer->variables()) all.push_back(std::move(v));
    return all;
}

std::vector<Variable> Model::trainable_variables() const {
    std::vector<Variable> all = variables();
    std::erase_if(all, [](const Variable& v) { return !v.trainable(); });
    return all;
}

std::size_t Model::count_params() const {
    std::size_t n = 0;
    for (const auto& layer : layers_) n += layer->count_params();
    return n;
}

std::string Model::summary() const {
    if (!built_) throw std::logic_error("model '" + name_ + "': summary before build; call build() first");
    BoxTable table({"Layer (type)", "Output Shape", "Param #", "Dtype policy", "Config"},
                   {false, false, true, false, false});
    constexpr std::size_t config_width = 32; // keeps the built-in models' tables within 120 columns
    std::size_t trainable = 0, frozen = 0;
    for (const auto& layer : layers_) {
        std::string name = layer->name();
        name += " (";
        name += layer->kind();
        name += ")";
        table.add_row({name, batch_shape_string(layer->output_shape()), with_commas(layer->count_params()),
                       layer->policy().name(), wrap_entries(layer->config(), config_width)});
        for (const Variable& v : layer->variables()) (v.trainable() ? trainable : frozen) += v.shape().elements();
    }
    // Variables are float32 masters under every policy: 4 bytes each, as Keras counts them.
    const auto count = [](std::size_t n) {
        std::string s = with_commas(n);
        s += " (";
        s += readable_bytes(4.0 * static_cast<double>(n));
        s += ")";
        return s;
    };
    std::string s = "Model: \"" + name_ + "\"\n";
    s += table.render();
    s += " Total params: ";
    s += count(trainable + frozen);
    s += "\n Trainable params: ";
    s += count(trainable);
    s += "\n Non-trainable params: ";
    s += count(frozen);
    s += "\n";
    return s;
}

TrainStepResult Model::train_step(const TrainStep& step) {
    return models::train_step(step, step.gradient_hook ? *step.gradient_hook : GradientHook{});
}

} // namespace mixprec::models
