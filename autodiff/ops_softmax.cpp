#include "ops_softmax.hpp"
