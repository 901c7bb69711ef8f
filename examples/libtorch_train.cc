// A small LibTorch training watched by trainscope: an MLP classifying synthetic points
// into 4 classes. Usage: libtorch_train LOGDIR [STEPS]
// The run lands in LOGDIR/libtorch-example; `trainscope show` / `diagnose` read it.
#include <trainscope/torch.h>

#include <iostream>

struct Net : torch::nn::Module {
  Net() : fc1(register_module("fc1", torch::nn::Linear(8, 64))), fc2(register_module("fc2", torch::nn::Linear(64, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: libtorch_train LOGDIR [STEPS]\n";
    return 2;
  }
  const int steps = argc > 2 ? std::stoi(argv[2]) : 200;
  torch::manual_seed(0);
  auto net = std::make_shared<Net>();
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  trainscope::TorchRun::Options options;
  options.logdir = argv[1];
  options.name = "libtorch-example";
  options.config_json = R"({"lr": 0.05, "model": "mlp 8-64-4"})";
  options.histograms_every = 10;
  options.weights_every = 5;
  trainscope::TorchRun run(options);
  run.Watch(*net, optimizer);

  const auto centers = torch::randn({4, 8}) * 2;
  for (int step = 0; step < steps; ++step) {
    torch::Tensor x, y;
    {
      auto wait = run.Phase("data");
      y = torch::randint(0, 4, {64}, torch::kLong);
      x = centers.index_select(0, y) + torch::randn({64, 8});
    }
    optimizer.zero_grad();
    run.MarkZeroGrad();
    torch::Tensor loss;
    {
      auto forward = run.Phase("forward");
      loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    }
    {
      auto backward = run.Phase("backward");
      loss.backward();
    }
    run.Step();
    run.Log("train/loss", loss.item<double>());
    if (step % 50 == 0) std::cout << "step " << step << " loss " << loss.item<double>() << "\n";
  }
  run.Finish();
  return 0;
}
