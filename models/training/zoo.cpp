// The built-in models mlp and cnn, and lookup by name (see zoo.hpp; vit() lives in vit.cpp).

#include <mixprec/models/training/zoo.hpp>

#include <mixprec/models/layers/layers_conv.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/layers/pooling.hpp>

#include <stdexcept>
#include <string>

namespace mixprec::models {

/// 784·512 + 512 + 512·512 + 512 + 512·10 + 10 = 669,706 parameters for (1, 28, 28) examples.
Sequential mlp() { return Sequential{Flatten(), Dense(512, "relu"), Dense(512, "relu"), Dense(10)}; }

/// Convolutions "valid", so 28 → 26 → 13 → 11 → 5 and the first Dense sees 64·5·5 = 1600 features:
/// 320 + 18,496 + 204,928 + 1,290 = 225,034 parameters. ReLU is fused into Conv2D and Dense.
Sequential cnn() {
    return Sequential{
        Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"), MaxPool2D({2, 2}), Flatten(),
        Dense(128, "relu"),         Dense(10)};
}

Sequential make_model(std::string_view name) {
    if (name == "mlp") return mlp();
    if (name == "cnn") return cnn();
    if (name == "vit") return vit();
    std::string message = "unknown model '";
    message += name;
    message += "': the built-in models are";
    for (std::string_view known : model_names()) {
        message += " ";
        message += known;
    }
    throw std::invalid_argument(message);
}

std::vector<std::string_view> model_names() { return {"mlp", "cnn", "vit"}; }

} // namespace mixprec::models
