#include "ops_nn.hpp"
