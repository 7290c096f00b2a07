#define BOOST_TEST_MODULE tensor
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

using namespace mixprec::autodiff;

BOOST_AUTO_TEST_CASE(storage_has_true_width) {
    for (int d = 0; d < dtype_count; ++d) {
        const auto dtype = static_cast<Dtype>(d);
        const Tensor t(Shape{3, 5}, dtype);
        BOOST_TEST(t.size() == 15u);
        BOOST_TEST(t.nbytes() == 15u * size_of(dtype));
        BOOST_TEST(t.dtype() == dtype);
    }
}
