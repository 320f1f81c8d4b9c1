// What differs by CPU architecture outside the reduce kernels: the spin-wait hint.
#pragma once

namespace accl {

// Tells the CPU this thread spins (x86 pause, Arm yield); nothing elsewhere.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace accl
