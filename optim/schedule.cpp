#include "schedule.hpp"
