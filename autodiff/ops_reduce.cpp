#include "ops_reduce.hpp"
