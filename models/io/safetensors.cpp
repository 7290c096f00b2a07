#include <mixprec/models/io/safetensors.hpp>

#include <mixprec/models/io/detail/bytes.hpp>
#include <mixprec/models/io/files.hpp>

#include <mixprec/autodiff/tensor/errors.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <utility>

namespace mixprec::models {
namespace {

using autodiff::Dtype;
using detail::in_quotes;
using Json = nlohmann::ordered_json;

constexpr std::size_t prefix_bytes = 8;
constexpr std::string_view metadata_key = "__metadata__";

[[noreturn]] void fail(const std::string& message) { throw safetensors_error(message); }

constexpr std::array<std::pair<Dtype, std::string_view>, 5> dtype_names = {{
    {Dtype::float32, "F32"},
    {Dtype::float16, "F16"},
    {Dtype::bfloat16, "BF16"},
    {Dtype::float8_e4m3, "F8_E4M3"},
    {Dtype::float8_e5m2, "F8_E5M2"},
}};

std::optional<Dtype> dtype_named(std::string_view name) {
    for (const auto& [dtype, text] : dtype_names)
        if (text == name) return dtype;
    return std::nullopt;
}

std::string known_dtypes() {
    std::string s;
    for (const auto& [dtype, text] : dtype_names) s += (s.empty() ? "" : ", ") + std::string(text);
    return s;
}

/// Aborts the parse (by throwing) on what no safetensors header holds, so that the document stays as
/// small as the format allows: nothing nested below a tensor's arrays, no array longer than a shape can
/// be, no repeated key.
class HeaderShape {
  public:
    bool operator()(int depth, nlohmann::detail::parse_event_t event, Json& parsed) {
        using Event = nlohmann::detail::parse_event_t;
        switch (event) {
        case Event::object_start:
            if (depth > 1) fail("the header nests an object deeper than a tensor entry");
            keys_[static_cast<std::size_t>(depth)].clear();
            break;
        case Event::array_start:
            if (depth != 2) fail("the header has an array outside a tensor entry");
            array_length_ = 0;
            break;
        case Event::key: {
            auto& seen = keys_.at(static_cast<std::size_t>(depth - 1));
            if (!seen.insert(parsed.get<std::string>()).second)
                fail("the key " + in_quotes(parsed.get<std::string>()) + " appears twice in the header");
            break;
        }
        case Event::value:
            if (depth == 3 && ++array_length_ > autodiff::Shape::max_rank)
                fail("the header has an array of more than " + std::to_string(autodiff::Shape::max_rank) + " entries");
            break;
        default:
            break;
        }
        return true;
    }

  private:
    std::array<std::set<std::string>, 2> keys_; // of the object at depth 0 and of the one at depth 1
    std::size_t array_length_ = 0;
};

/// One tensor entry of the header, checked.
struct Entry {
    std::string name;
    Dtype dtype;
    autodiff::Shape shape;
    std::uint64_t begin, end;
};

std::uint64_t unsigned_number(const Json& j, const std::string& what) {
    if (!j.is_number_unsigned()) fail(what + " must be a non-negative integer, got " + j.dump());
    return j.get<std::uint64_t>();
}

Entry parse_entry(const std::string& name, const Json& j) {
    const std::string where = "tensor " + in_quotes(name);
    if (name.empty()) fail("a tensor has an empty name");
    if (!j.is_object()) fail(where + ": the entry must be an object, got " + j.dump());
    for (const auto& [key, value] : j.items())
        if (key != "dtype" && key != "shape" && key != "data_offsets")
            fail(where + ": unknown field " + in_quotes(key) + " (expected dtype, shape, data_offsets)");
    if (!j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
        fail(where + ": the entry needs dtype, shape and data_offsets");
    const Json& dtype = j["dtype"];
    if (!dtype.is_string()) fail(where + ": dtype must be a string, got " + dtype.dump());
    const std::optional<Dtype> known = dtype_named(dtype.get<std::string>());
    if (!known)
        fail(where + " has dtype " + dtype.dump() + ", which mixprec does not read (it reads " + known_dtypes() + ")");
    const Json& shape = j["shape"];
    if (!shape.is_array()) fail(where + ": shape must be an array, got " + shape.dump());
    std::vector<std::size_t> dims;
    for (const Json& d : shape) dims.push_back(static_cast<std::size_t>(unsigned_number(d, where + ": a dimension")));
    Entry e{name, *known, {}, 0, 0};
    try {
        e.shape = autodiff::Shape(std::span<const std::size_t>(dims));
    } catch (const autodiff::shape_error& error) {
        fail(where + ": " + error.what());
    }
    const Json& offsets = j["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
        fail(where + ": data_offsets must be [begin, end], got " + offsets.dump());
    e.begin = unsigned_number(offsets[0], where + ": data_offsets[0]");
    e.end = unsigned_number(offsets[1], where + ": data_offsets[1]");
    if (e.end < e.begin) fail(where + ": data_offsets end before they begin: " + offsets.dump());
    const std::uint64_t bytes = std::uint64_t{e.shape.elements()} * autodiff::size_of(e.dtype);
    if (e.end - e.begin != bytes)
        fail(where + " of dtype " + dtype.get<std::string>() + " and shape " + e.shape.to_string() + " takes " +
             std::to_string(bytes) + " bytes, its data_offsets " + offsets.dump() + " hold " +
             std::to_string(e.end - e.begin));
    return e;
}

std::map<std::string, std::string> parse_metadata(const Json& j) {
    if (!j.is_object()) fail("__metadata__ must be an object of strings, got " + j.dump());
    std::map<std::string, std::string> metadata;
    for (const auto& [key, value] : j.items()) {
        if (!value.is_string()) fail("__metadata__ " + in_quotes(key) + " must be a string, got " + value.dump());
        metadata[key] = value.get<std::string>();
    }
    return metadata;
}

/// Checks that the entries tile the data: sorted by offset, each begins where the one before ended, the
/// first at 0 and the last at the end of the data.
void check_tiling(std::vector<Entry>& entries, std::uint64_t data_bytes) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
    std::uint64_t at = 0;
    for (const Entry& e : entries) {
        if (e.begin < at)
            fail("tensor " + in_quotes(e.name) + " at bytes [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + ") overlaps the tensor before it, which ends at " + std::to_string(at));
        if (e.begin > at)
            fail("bytes [" + std::to_string(at) + ", " + std::to_string(e.begin) +
                 ") of the data belong to no tensor (before " + in_quotes(e.name) + ")");
        at = e.end;
    }
    if (at != data_bytes)
        fail("the tensors end at byte " + std::to_string(at) + " of the data, which holds " +
             std::to_string(data_bytes) + " bytes" + (at > data_bytes ? " (truncated file?)" : ""));
}

std::string at(const std::filesystem::path& path) { return "safetensors file " + in_quotes(path.string()) + ": "; }

} // namespace

const autodiff::Tensor* find_tensor(std::span<const NamedTensor> tensors, std::string_view name) {
    for (const NamedTensor& t : tensors)
        if (t.name == name) return &t.tensor;
    return nullptr;
}

std::optional<std::string_view> safetensors_dtype(Dtype dtype) {
    for (const auto& [d, text] : dtype_names)
        if (d == dtype) return text;
    return std::nullopt;
}

std::vector<std::uint8_t> safetensors_bytes(std::span<const NamedTensor> tensors,
                                            const std::map<std::string, std::string>& metadata) {
    Json header = Json::object();
    if (!metadata.empty()) {
        Json m = Json::object();
        for (const auto& [key, value] : metadata) m[key] = value;
        header[std::string(metadata_key)] = std::move(m);
    }
    std::set<std::string_view> names;
    std::uint64_t offset = 0;
    for (const NamedTensor& t : tensors) {
        if (t.name.empty()) fail("a tensor needs a name");
        if (t.name == metadata_key) fail("a tensor cannot be called '__metadata__'");
        if (!names.insert(t.name).second) fail("two tensors are called " + in_quotes(t.name));
        const std::optional<std::string_view> dtype = safetensors_dtype(t.tensor.dtype());
        if (!dtype)
            fail("tensor " + in_quotes(t.name) + " is " + std::string(autodiff::name_of(t.tensor.dtype())) +
                 ", which safetensors cannot hold (it holds " + known_dtypes() + "): convert it first");
        Json shape = Json::array();
        for (std::size_t d : t.tensor.shape()) shape.push_back(d);
        header[t.name] = {
            {"dtype", std::string(*dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + t.tensor.nbytes()}}};
        offset += t.tensor.nbytes();
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const Json::type_error& e) { // a name or metadata that is not UTF-8
        fail(std::string("the header cannot be written: ") + e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' '); // the data begins at a multiple of 8 bytes
    std::vector<std::uint8_t> out(prefix_bytes + text.size() + offset);
    for (std::size_t i = 0; i < prefix_bytes; ++i) out[i] = static_cast<std::uint8_t>(text.size() >> (8 * i));
    std::memcpy(out.data() + prefix_bytes, text.data(), text.size());
    std::uint8_t* data = out.data() + prefix_bytes + text.size();
    for (const NamedTensor& t : tensors) {
        if (t.tensor.nbytes() > 0) std::memcpy(data, t.tensor.raw(), t.tensor.nbytes());
        data += t.tensor.nbytes();
    }
    return out;
}

void write_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
    detail::located<safetensors_error>(at(path),
                                       [&] { write_file_atomically(path, safetensors_bytes(tensors, metadata)); });
}

SafetensorsContent parse_safetensors(std::span<const std::uint8_t> bytes) {
    if (bytes.size() < prefix_bytes)
        fail(std::to_string(bytes.size()) + " bytes is too short for a safetensors file (at least 8)");
    std::uint64_t header_bytes = 0;
    for (std::size_t i = prefix_bytes; i-- > 0;) header_bytes = (header_bytes << 8) | bytes[i];
    if (header_bytes > max_safetensors_header_bytes)
        fail("a header of " + std::to_string(header_bytes) + " bytes exceeds the limit of " +
             std::to_string(max_safetensors_header_bytes));
    if (header_bytes > bytes.size() - prefix_bytes)
        fail("the header of " + std::to_string(header_bytes) + " bytes does not fit in the " +
             std::to_string(bytes.size() - prefix_bytes) + " bytes after the length (truncated file?)");
    const auto* text = reinterpret_cast<const char*>(bytes.data() + prefix_bytes);
    if (header_bytes == 0 || text[0] != '{') fail("the header is not a JSON object (it must begin with '{')");

    Json header;
    try {
        header = Json::parse(text, text + header_bytes, HeaderShape{});
    } catch (const Json::exception& e) {
        fail(std::string("the header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail("the header is not a JSON object");

    SafetensorsContent content;
    std::vector<Entry> entries;
    for (const auto& [name, value] : header.items()) {
        if (name == metadata_key)
            content.metadata = parse_metadata(value);
        else
            entries.push_back(parse_entry(name, value));
    }
    const std::span<const std::uint8_t> data = bytes.subspan(prefix_bytes + header_bytes);
    check_tiling(entries, data.size());

    for (const Entry& e : entries) {
        autodiff::Tensor t = autodiff::Tensor::uninitialized(e.shape, e.dtype);
        if (t.nbytes() > 0) std::memcpy(t.raw(), data.data() + e.begin, t.nbytes());
        content.tensors.push_back({e.name, std::move(t)});
    }
    return content;
}

SafetensorsContent read_safetensors(const std::filesystem::path& path) {
    return detail::located<safetensors_error>(
        at(path), [&] { return parse_safetensors(read_file_bounded(path, max_safetensors_file_bytes)); });
}

} // namespace mixprec::models
