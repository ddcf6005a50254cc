"""C++ source: the core extension's Python entry points (a CPython module in the same library).

Why: eager code reached the forward operator through its OpOverload (`torch.ops...group_norm_forward.default._op`),
whose boxed call matches the 8 arguments against the schema one by one and wraps all three outputs as Python
tensors. On a 2-core AMD EPYC at one thread, (1,8,4,4) float32, that call took 13.3 us against 6.8 for
`torch.group_norm`; this entry, which reads its arguments positionally (METH_FASTCALL) and hands back only the
output, 9.6 us. (A pybind11 function with the same typed arguments took 19 us: its casters for
optional tensors and the overload machinery cost more than the boxed call.)

The functions call the operator through the dispatcher (its typed handle, gn_inline_autograd::forward_op), as
the OpOverload does, so autograd, autocast, tracing and Python dispatch modes see the same operator. The
package's Python calls them only outside torch.compile and when no argument or mode overrides
`__torch_function__` (functional.py); otherwise it calls the OpOverload.

  group_norm(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta) -> out
  group_norm_with_stats(same arguments) -> (out, mean, rstd)

Arguments: input a Tensor; num_groups an int; weight, bias a Tensor or None; eps, act_alpha, act_beta floats;
activation an int (gn_act::Kind). Anything else raises TypeError (the Python callers check their types first).
The GIL is released while the operator runs, as PyTorch's own bindings do.

Concatenated after the other C++ sources of the core extension (it uses forward_op from
group_norm_autograd.py); kept out of an exported single-file submission, which calls torch.ops only.
The module is PYTHON_MODULE_NAME, imported from the library by groupnorm_inline.jit.python_module.
"""

PYTHON_MODULE_NAME = "_groupnorm_inline_entry"

PYTHON_ENTRY_SOURCE = r"""
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

namespace gn_inline_python {

// Releases the GIL for its scope, and takes it back when an exception leaves the scope too.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased() { PyEval_RestoreThread(state_); }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

struct ForwardArgs {
  at::Tensor input;
  int64_t num_groups = 0;
  std::optional<at::Tensor> weight, bias;
  double eps = 0.0;
  int64_t activation = 0;
  double act_alpha = 0.0, act_beta = 0.0;
};

// False with a Python TypeError set when an argument is not of its type.
bool parse_optional_tensor(PyObject* object, const char* name, std::optional<at::Tensor>* out) {
  if (object == Py_None) return true;
  if (!THPVariable_Check(object)) {
    PyErr_Format(PyExc_TypeError, "group_norm: expected %s to be a Tensor or None, got %s", name,
                 Py_TYPE(object)->tp_name);
    return false;
  }
  *out = THPVariable_Unpack(object);
  return true;
}

bool parse_int(PyObject* object, const char* name, int64_t* out) {
  if (!PyLong_Check(object) || PyBool_Check(object)) {
    PyErr_Format(PyExc_TypeError, "group_norm: %s must be an int, got %s", name, Py_TYPE(object)->tp_name);
    return false;
  }
  const long long value = PyLong_AsLongLong(object);
  if (value == -1 && PyErr_Occurred()) return false;  // OverflowError
  *out = static_cast<int64_t>(value);
  return true;
}

bool parse_float(PyObject* object, const char* name, double* out) {
  if (!PyFloat_Check(object)) {
    PyErr_Format(PyExc_TypeError, "group_norm: %s must be a float, got %s", name, Py_TYPE(object)->tp_name);
    return false;
  }
  *out = PyFloat_AS_DOUBLE(object);
  return true;
}

bool parse_forward_args(PyObject* const* args, Py_ssize_t nargs, ForwardArgs* a) {
  if (nargs != 8) {
    PyErr_Format(PyExc_TypeError,
                 "group_norm entry takes 8 positional arguments (input, num_groups, weight, bias, eps, "
                 "activation, act_alpha, act_beta), got %zd", nargs);
    return false;
  }
  if (!THPVariable_Check(args[0])) {
    PyErr_Format(PyExc_TypeError, "group_norm: expected input to be a Tensor, got %s", Py_TYPE(args[0])->tp_name);
    return false;
  }
  a->input = THPVariable_Unpack(args[0]);
  return parse_int(args[1], "num_groups", &a->num_groups) && parse_optional_tensor(args[2], "weight", &a->weight) &&
         parse_optional_tensor(args[3], "bias", &a->bias) && parse_float(args[4], "eps", &a->eps) &&
         parse_int(args[5], "activation", &a->activation) && parse_float(args[6], "act_alpha", &a->act_alpha) &&
         parse_float(args[7], "act_beta", &a->act_beta);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_forward(const ForwardArgs& a) {
  GilReleased no_gil;
  return gn_inline_autograd::forward_op().call(a.input, a.num_groups, a.weight, a.bias, a.eps, a.activation,
                                               a.act_alpha, a.act_beta);
}

PyObject* group_norm(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  ForwardArgs a;
  if (!parse_forward_args(args, nargs, &a)) return nullptr;
  at::Tensor out = std::get<0>(call_forward(a));
  return THPVariable_Wrap(std::move(out));
  END_HANDLE_TH_ERRORS
}

PyObject* group_norm_with_stats(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  ForwardArgs a;
  if (!parse_forward_args(args, nargs, &a)) return nullptr;
  auto [out, mean, rstd] = call_forward(a);
  PyObject* result = PyTuple_New(3);
  if (result == nullptr) return nullptr;
  PyObject* items[3] = {THPVariable_Wrap(std::move(out)), THPVariable_Wrap(std::move(mean)),
                        THPVariable_Wrap(std::move(rstd))};
  for (int i = 0; i < 3; ++i) {
    if (items[i] == nullptr) {
      for (int j = i + 1; j < 3; ++j) Py_XDECREF(items[j]);
      Py_DECREF(result);  // releases the items already set
      return nullptr;
    }
    PyTuple_SET_ITEM(result, i, items[i]);
  }
  return result;
  END_HANDLE_TH_ERRORS
}

// METH_FASTCALL functions are _PyCFunctionFast; PyMethodDef stores a PyCFunction.
template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
PyCFunction fastcall() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F));
}

PyMethodDef methods[] = {
    {"group_norm", fastcall<group_norm>(), METH_FASTCALL,
     "group_norm(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta) -> out"},
    {"group_norm_with_stats", fastcall<group_norm_with_stats>(), METH_FASTCALL,
     "group_norm_with_stats(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta) -> "
     "(out, mean, rstd)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "@PYTHON_MODULE_NAME@",
                          "groupnorm_inline's Python entry points to its forward operator", -1, methods,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace gn_inline_python

PyMODINIT_FUNC PyInit_@PYTHON_MODULE_NAME@(void) { return PyModule_Create(&gn_inline_python::module_def); }
""".replace("@PYTHON_MODULE_NAME@", PYTHON_MODULE_NAME)
