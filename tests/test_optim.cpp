#define BOOST_TEST_MODULE optim
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

BOOST_AUTO_TEST_CASE(placeholder) { BOOST_TEST(true); }
