// Host-side settings read from the environment once (the kernels' A/B switches).
#pragma once

#include <cstdlib>

namespace revolta {

// The integer value of environment variable `name`, or `fallback` when it is unset or empty.
inline int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e != nullptr && *e != '\0' ? std::atoi(e) : fallback;
}

}  // namespace revolta
