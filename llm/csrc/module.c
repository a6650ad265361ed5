/* Python glue of llm._kernels: argument checks, GIL release, errors a caller can read.
 *
 * All tensors are passed as addresses (tensor.data_ptr()), contiguous, float32 unless
 * named otherwise; llm/kernels.py is the only caller and owns the shapes.
 *   linear_q4_1(x, w, out, M, N, K)   out (M, N) = x (M, K) @ W (N, K).T, W in Q4_1
 *   linear_q8_0(x, w, out, M, N, K)   the same for Q8_0 blocks
 *   attention(q, k_cache, v_cache, context_slots, positions, out, B, T, H, Hkv, D, S,
 *             scale)                  see paged_attention in kernels.h
 *   rms_norm(x, weight, out, rows, dim, eps)
 *   supported() -> bool               this CPU has AVX2, FMA and F16C
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernels.h"

int cpu_supported(void) {
#if HAVE_X86
    /* Asked on every kernel call (~150 a decode step): the CPU does not change. */
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    }
    return known;
#else
    return 0;
#endif
}

/* args: `pointers` addresses, then `sizes` integers. 0 on success. */
static int parse(PyObject *const *args, Py_ssize_t nargs, const char *signature, int pointers,
                 int sizes, void **ptr, int64_t *size) {
    if (nargs < pointers + sizes) {
        PyErr_Format(PyExc_TypeError, "%s takes %d arguments", signature, pointers + sizes);
        return -1;
    }
    for (int i = 0; i < pointers; i++) {
        ptr[i] = PyLong_AsVoidPtr(args[i]);
        if (ptr[i] == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: null address", signature);
            return -1;
        }
    }
    for (int i = 0; i < sizes; i++) {
        size[i] = PyLong_AsLongLong(args[pointers + i]);
        if (size[i] == -1 && PyErr_Occurred()) return -1;
        if (size[i] < 1) {
            PyErr_Format(PyExc_ValueError, "%s: sizes must be >= 1", signature);
            return -1;
        }
    }
    if (!cpu_supported()) {
        PyErr_Format(PyExc_RuntimeError, "%s needs an x86-64 CPU with AVX2, FMA and F16C",
                     signature);
        return -1;
    }
    return 0;
}

static PyObject *linear(PyObject *const *args, Py_ssize_t nargs, const char *signature,
                        int block_bytes) {
    void *ptr[3];
    int64_t size[3];
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "%s takes 6 arguments", signature);
        return NULL;
    }
    if (parse(args, nargs, signature, 3, 3, ptr, size) != 0) return NULL;
    const int64_t M = size[0], N = size[1], K = size[2];
    if (K % QK != 0 || K > MAX_K) {
        PyErr_Format(PyExc_ValueError, "%s: K must be a multiple of %d up to %d, got %lld",
                     signature, QK, MAX_K, (long long)K);
        return NULL;
    }
    int status = -1;
#if HAVE_X86
    Py_BEGIN_ALLOW_THREADS
    status = blocks_matmul(block_bytes, ptr[0], ptr[1], ptr[2], M, N, K);
    Py_END_ALLOW_THREADS
#endif
    if (status != 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *linear_q4_1(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return linear(args, nargs, "linear_q4_1(x, w, out, M, N, K)", Q4_1_BYTES);
}

static PyObject *linear_q8_0(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return linear(args, nargs, "linear_q8_0(x, w, out, M, N, K)", Q8_0_BYTES);
}

static PyObject *attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    const char *signature =
        "attention(q, k_cache, v_cache, context_slots, positions, out, B, T, H, Hkv, D, S, "
        "scale)";
    void *ptr[6];
    int64_t size[6];
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "%s takes 13 arguments", signature);
        return NULL;
    }
    if (parse(args, nargs, signature, 6, 6, ptr, size) != 0) return NULL;
    const double scale = PyFloat_AsDouble(args[12]);
    if (scale == -1.0 && PyErr_Occurred()) return NULL;
    const int64_t B = size[0], T = size[1], H = size[2], Hkv = size[3], D = size[4], S = size[5];
    if (H % Hkv != 0 || D % 8 != 0 || D > MAX_HEAD_DIM) {
        PyErr_Format(PyExc_ValueError,
                     "%s: need H a multiple of Hkv and D a multiple of 8 up to %d "
                     "(got H=%lld, Hkv=%lld, D=%lld)",
                     signature, MAX_HEAD_DIM, (long long)H, (long long)Hkv, (long long)D);
        return NULL;
    }
    int status = -1;
#if HAVE_X86
    Py_BEGIN_ALLOW_THREADS
    status = paged_attention(ptr[0], ptr[1], ptr[2], ptr[3], ptr[4], ptr[5], B, T, H, Hkv, D,
                             S, (float)scale);
    Py_END_ALLOW_THREADS
#endif
    if (status != 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *rms_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    const char *signature = "rms_norm(x, weight, out, rows, dim, eps)";
    void *ptr[3];
    int64_t size[2];
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "%s takes 6 arguments", signature);
        return NULL;
    }
    if (parse(args, nargs, signature, 3, 2, ptr, size) != 0) return NULL;
    const double eps = PyFloat_AsDouble(args[5]);
    if (eps == -1.0 && PyErr_Occurred()) return NULL;
#if HAVE_X86
    rms_norm_rows(ptr[0], ptr[1], ptr[2], size[0], size[1], (float)eps); /* ~1 us: GIL kept */
#endif
    Py_RETURN_NONE;
}

static PyObject *supported(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(cpu_supported());
}

static PyMethodDef methods[] = {
    {"linear_q4_1", (PyCFunction)(void (*)(void))linear_q4_1, METH_FASTCALL,
     "out (M, N) = x (M, K) @ W.T for Q4_1 blocks W (N, K); arguments are addresses."},
    {"linear_q8_0", (PyCFunction)(void (*)(void))linear_q8_0, METH_FASTCALL,
     "out (M, N) = x (M, K) @ W.T for Q8_0 blocks W (N, K); arguments are addresses."},
    {"attention", (PyCFunction)(void (*)(void))attention, METH_FASTCALL,
     "Causal attention over the paged KV cache, float32; arguments are addresses."},
    {"rms_norm", (PyCFunction)(void (*)(void))rms_norm, METH_FASTCALL,
     "RMSNorm of float32 rows; arguments are addresses."},
    {"supported", supported, METH_NOARGS, "Whether this CPU can run the kernels."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "llm._kernels", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
