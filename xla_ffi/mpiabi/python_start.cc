// jax_accl started by the environment alone in a process whose start-up skipped jax_accl's
// hook (startup/_jax_accl_startup.py): when jaxlib's MPItrampoline loads this library
// (during `import jax`, the importing thread holding Python's GIL), it asks the
// interpreter to import jax_accl once jax.distributed has initialized
// (_jax_accl_startup.after_initialize, which acts only with JAX_ACCL_XLA_COLLECTIVES=1).
// Outside Python (the native self-test), or where jax_accl is already imported or on its
// way, nothing.
// Python's C API is looked up in the process, not linked: the library stays loadable
// anywhere.
#include <dlfcn.h>

namespace {

template <typename Function>
Function python(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

constexpr char kStart[] =
    "import sys\n"
    "if 'jax_accl' not in sys.modules:\n"
    "    try:\n"
    "        import _jax_accl_startup\n"
    "    except ImportError:\n"
    "        pass  # jax_accl's calls then fail naming what is not set up\n"
    "    else:\n"
    "        _jax_accl_startup.after_initialize()\n";

__attribute__((constructor)) void start_jax_accl_with_jax() {
  const auto is_initialized = python<int (*)()>("Py_IsInitialized");
  const auto ensure = python<int (*)()>("PyGILState_Ensure");
  const auto release = python<void (*)(int)>("PyGILState_Release");
  const auto run = python<int (*)(const char*)>("PyRun_SimpleString");
  if (is_initialized == nullptr || ensure == nullptr || release == nullptr || run == nullptr ||
      !is_initialized()) {
    return;
  }
  const int state = ensure();
  run(kStart);
  release(state);
}

}  // namespace
