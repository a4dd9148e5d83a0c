// torchscript_load.cpp - TorchScript from C++ without Python: loads the
// module that tests/cpp/torchscript_save.py scripted (it calls tk::rwkv_forward
// and tk::brick_pad), runs forward and backward, and compares the output and
// every gradient with the values Python saved. libtk is linked with
// --no-as-needed, so loading it registers the tk ops and their C++ Autograd
// kernel before torch::jit::load resolves them.
//
// Usage: torchscript_load DIR   (DIR/module.pt, DIR/expected.pt)
// Exit status 0 when everything matches.
#include <torch/script.h>

#include <cstdio>
#include <string>

namespace {

int failures = 0;

// Compares got with the tensor attribute `name` of expected (float32 values
// computed by the same kernels in Python: equal up to summation order).
void check(const torch::jit::Module& expected, const std::string& name, const at::Tensor& got) {
  const at::Tensor want = expected.attr(name).toTensor();
  const bool defined = got.defined();
  const bool ok = defined && got.sizes() == want.sizes() && at::allclose(got, want, 1e-5, 1e-6);
  const double err = defined && got.sizes() == want.sizes() ? (got - want).abs().max().item<double>() : -1.0;
  std::printf("%-24s %s (max |err| %.3g)\n", name.c_str(), ok ? "ok" : "MISMATCH", err);
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: torchscript_load DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    torch::jit::Module module = torch::jit::load(dir + "/module.pt");
    torch::jit::Module expected = torch::jit::load(dir + "/expected.pt");
    const std::string graph = module.get_method("forward").graph()->toString();
    for (const char* op : {"tk::rwkv_forward", "tk::brick_pad"}) {
      const bool found = graph.find(op) != std::string::npos;
      std::printf("%-24s %s\n", op, found ? "in the graph" : "MISSING from the graph");
      if (!found) ++failures;
    }

    at::Tensor x = expected.attr("x").toTensor().clone().requires_grad_(true);
    at::Tensor y = module.forward({x}).toTensor();
    check(expected, "y", y);
    (y * expected.attr("grad_y").toTensor()).sum().backward();
    check(expected, "grad_x", x.grad());
    for (const auto& p : module.named_parameters()) {
      std::string name = "grad_" + p.name;
      for (char& c : name)
        if (c == '.') c = '_';
      check(expected, name, p.value.grad());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torchscript_load: %s\n", e.what());
    return 1;
  }
  if (failures) {
    std::printf("torchscript_load: %d mismatch(es)\n", failures);
    return 1;
  }
  std::printf("torchscript_load: forward and backward match Python\n");
  return 0;
}
