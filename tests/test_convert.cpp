#define BOOST_TEST_MODULE convert
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

BOOST_AUTO_TEST_CASE(placeholder_compiles) { BOOST_TEST(true); }
