#include "optimizer.hpp"
