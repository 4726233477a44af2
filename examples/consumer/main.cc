// Joins a one-member world and all-reduces a tensor: the smallest complete multiworld program.
#include <multiworld/multiworld.h>

#include <cstdio>

int main() {
  mw::WorldManager manager;
  mw::WorldOptions options;
  options.name = "solo";
  options.rank = 0;
  options.size = 1;
  mw::Status s = manager.initWorld(options, mw::deadlineIn(std::chrono::seconds(10)));
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.toString().c_str());
    return 1;
  }
  mw::Communicator comm(manager);
  float values[4] = {1, 2, 3, 4};
  s = comm.allReduce("solo", mw::Tensor::cpu(values, 4)).wait();
  std::printf("consumer: all_reduce in world 'solo': %s, values %g %g %g %g\n",
              s.toString().c_str(), values[0], values[1], values[2], values[3]);
  return s.ok() ? 0 : 1;
}
