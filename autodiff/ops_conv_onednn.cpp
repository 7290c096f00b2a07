// bfloat16 conv2d through oneDNN convolution primitives (being written).
#include "ops_conv.hpp"
