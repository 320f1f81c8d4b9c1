// jax_accl started by the environment alone in a process whose start-up skipped jax_accl's
// hook (startup/_jax_accl_startup.py): when jaxlib's MPItrampoline loads this library
// into a Python process (during `import jax`), it asks the interpreter to import
// jax_accl once jax.distributed has initialized (_jax_accl_startup.after_initialize,
// which acts only with JAX_ACCL_XLA_COLLECTIVES=1). The request is a pending call: the
// loader's constructor runs with glibc's loader lock held, where taking the GIL (or
// running Python) could deadlock against a thread that holds the GIL and loads a
// library; Py_AddPendingCall needs neither, and the interpreter runs the call on its
// main thread after dlopen has returned, before it executes any more Python there.
// Outside Python (the native self-test), or where jax_accl is already imported, nothing.
// Python's C API is looked up in the process, not linked: the library loads anywhere.
#include <dlfcn.h>

#include <initializer_list>

namespace {

using PyObject = void;

template <typename Function>
Function python(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

// On the interpreter's main thread, the GIL held: import _jax_accl_startup and call its
// after_initialize(), unless jax_accl is imported already; every error cleared (jax_accl's
// calls then fail naming what is not set up).
int start_on_main_thread(void*) {
  const auto modules = python<PyObject* (*)()>("PyImport_GetModuleDict");
  const auto get_item = python<PyObject* (*)(PyObject*, const char*)>("PyDict_GetItemString");
  const auto import = python<PyObject* (*)(const char*)>("PyImport_ImportModule");
  const auto get_attr = python<PyObject* (*)(PyObject*, const char*)>("PyObject_GetAttrString");
  const auto call = python<PyObject* (*)(PyObject*)>("PyObject_CallNoArgs");
  const auto release = python<void (*)(PyObject*)>("Py_DecRef");
  const auto clear = python<void (*)()>("PyErr_Clear");
  if (!modules || !get_item || !import || !get_attr || !call || !release || !clear) return 0;
  if (get_item(modules(), "jax_accl") != nullptr) return 0;
  PyObject* startup = import("_jax_accl_startup");
  if (startup == nullptr) {
    clear();
    return 0;
  }
  PyObject* after = get_attr(startup, "after_initialize");
  PyObject* result = after != nullptr ? call(after) : nullptr;
  if (result == nullptr) clear();
  for (PyObject* object : {result, after, startup}) {
    if (object != nullptr) release(object);
  }
  return 0;
}

__attribute__((constructor)) void start_jax_accl_with_jax() {
  const auto is_initialized = python<int (*)()>("Py_IsInitialized");
  const auto add_pending = python<int (*)(int (*)(void*), void*)>("Py_AddPendingCall");
  if (is_initialized == nullptr || add_pending == nullptr || !is_initialized()) return;
  add_pending(start_on_main_thread, nullptr);
}

}  // namespace
