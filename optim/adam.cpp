#include "adam.hpp"
