/// The built-in vision transformer for Fashion-MNIST-sized images (see zoo.hpp).

#include <mixprec/models/training/zoo.hpp>

#include <mixprec/models/layers/embedding.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/layers/layers_norm.hpp>
#include <mixprec/models/layers/pooling.hpp>
#include <mixprec/models/layers/transformer.hpp>

namespace mixprec::models {

// Parameters for examples (1, 28, 28), 71,946 in all:
//   Patches(7)                 (1, 28, 28) -> (16, 49)                                             0
//   Dense(64)                  (16, 49) -> (16, 64)    49·64 + 64                               3,200
//   PositionEmbedding          (16, 64)                16·64                                    1,024
//   TransformerBlock × 2       (16, 64)                2 × 33,472                              66,944
//       norm1 64 + 64 = 128; attention qkv 64·192 + 192 = 12,480, output 64·64 + 64 = 4,160;
//       norm2 128; mlp1 64·128 + 128 = 8,320; mlp2 128·64 + 64 = 8,256
//   LayerNorm                  (16, 64)                64 + 64                                    128
//   GlobalAveragePooling1D     (16, 64) -> (64)                                                     0
//   Dense(10)                  (64) -> (10)            64·10 + 10                                 650
// Forward multiply-adds per example: 50 k for the projection and 557 k per block (qkv 197 k, scores and
// context 33 k, output 66 k, MLP 262 k), about 1.17 million in all.
Sequential vit() {
    constexpr std::size_t width = 64, heads = 4, mlp_width = 128;
    constexpr float epsilon = 1e-6f; // the original ViT's; the blocks use the same
    return Sequential(Patches(7), Dense(width), PositionEmbedding(), TransformerBlock(heads, mlp_width),
                      TransformerBlock(heads, mlp_width), LayerNorm(epsilon), GlobalAveragePooling1D(), Dense(10));
}

} // namespace mixprec::models
