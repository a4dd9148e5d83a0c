// cpp_load: runs a TorchScript module that calls tk operators, from C++ with
// no Python. Linking tk::tk (find_package(tk)) is all it takes: libtk is
// loaded with the program and registers torch.ops.tk.* before main, so
// torch::jit::load resolves the module's tk:: calls.
//
// Usage: cpp_load DIR
//   DIR/module.pt    a scripted module taking one tensor
//   DIR/expected.pt  a scripted module whose attributes x and y are an input
//                    and the output Python computed for it
// tests/cpp/torchscript_save.py writes both. Prints the tk ops in the
// module's graph and the largest difference from y; exit status 0 when the
// module calls at least one tk op and matches y.
#include <torch/script.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cpp_load DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    torch::jit::Module module = torch::jit::load(dir + "/module.pt");
    torch::jit::Module expected = torch::jit::load(dir + "/expected.pt");

    // The operators the module calls from the tk namespace.
    const std::string graph = module.get_method("forward").graph()->toString();
    const std::regex tk_call("tk::[A-Za-z_0-9]+");
    std::set<std::string> ops;
    for (auto it = std::sregex_iterator(graph.begin(), graph.end(), tk_call); it != std::sregex_iterator(); ++it)
      ops.insert(it->str());
    for (const std::string& op : ops) std::printf("calls %s\n", op.c_str());

    const at::Tensor x = expected.attr("x").toTensor();
    const at::Tensor want = expected.attr("y").toTensor();
    torch::NoGradGuard no_grad;
    const at::Tensor got = module.forward({x}).toTensor();
    const bool same_shape = got.sizes() == want.sizes();
    const double err = same_shape ? (got - want).abs().max().item<double>() : -1.0;
    std::printf("output %s, max |difference| from Python %.3g\n", same_shape ? "same shape" : "WRONG SHAPE", err);
    if (ops.empty() || !same_shape || !at::allclose(got, want, 1e-5, 1e-6)) {
      std::printf("cpp_load: FAILED\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_load: %s\n", e.what());
    return 1;
  }
  std::printf("cpp_load: ok\n");
  return 0;
}
