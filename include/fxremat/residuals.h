// The residual report: one line per saved value, like JAX's
// jax.ad_checkpoint.print_saved_residuals, then totals.
#pragma once

#include <string>

#include "fxremat/partition.h"

namespace fxremat {

// Given a signature with a saved primal, a named value and an offloaded one:
//   f32[5,4] from the argument primals_1 (W1)      saved      fw_out 1  bw_in 0
//   f32[5] named 'a' (prog.py:12 (f4))             saved      fw_out 2  bw_in 1
//   f32[5] output of aten.sin (prog.py:6 (g))      offloaded  fw_out 3  bw_in 2
//   3 residuals: 104 B saved on device, 20 B offloaded to host
// Lines follow the forward-output order (saved tensors, then symints).
std::string ResidualReport(const Signature& signature);

// One saved value as the report describes it: its short type ("f32[5,4]",
// "Sym(s0)") and where it comes from ("from the argument primals_1 (W1)",
// "named 'a'", "output of aten.sin (prog.py:6 (g))"). The Python package's
// structured residuals take these (one formatting, in C++).
struct ResidualDescription {
  std::string short_type;
  std::string origin;
};
ResidualDescription DescribeResidual(const SavedValue& value, const Signature& signature);

}  // namespace fxremat
