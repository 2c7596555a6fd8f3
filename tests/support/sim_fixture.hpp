// An allocator on a fresh simulated device of a given capacity, for engine tests that look at
// its stats and, through `dev`, at what the device holds.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot::testing {

/// `alloc` built from config `conf` on `dev`, a simulated device of `capacity` bytes.
struct sim_fixture {
  sim_fixture(const std::string& conf, std::size_t capacity) {
    sim_options o;
    o.capacity = capacity;
    dev = std::make_shared<simulated_device>(o);
    alloc = std::make_unique<allocator>(config::parse(conf), dev);
  }
  std::shared_ptr<simulated_device> dev;
  std::unique_ptr<allocator> alloc;
};

}  // namespace cachalot::testing
