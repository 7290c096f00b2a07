#include "ops_loss.hpp"
