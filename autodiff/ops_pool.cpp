#include "ops_pool.hpp"
