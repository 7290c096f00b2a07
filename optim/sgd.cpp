#include "sgd.hpp"
