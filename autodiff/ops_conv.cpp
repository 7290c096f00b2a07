#include "ops_conv.hpp"
