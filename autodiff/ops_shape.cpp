#include "ops_shape.hpp"
