"""A prepared ``tracea.ops`` call on CUDA tensors, in C: the loop of ``Prepared.__call__`` without Python frames.

A repeated call's host time is the driver's launch plus the call's own glue, and the glue was Python: a list
of pointers, a lambda for the result, a tuple, the stream, the tape's ``replay`` (a method, then a ctypes
call converting four arguments), the counter and the route. ``LAUNCHER_C`` is a small CPython extension type,
built once by the host C compiler into the compile cache (keyed, like every binary there, by its source, its
flags and the compiler, and here also by this interpreter's version and include folder), that does the same
steps with the same torch calls (``Tensor.data_ptr``, the allocation, the stream query) through the C API,
and replays the recorded driver calls by calling ``tr_replay`` (``emitters/cuda/launches.py``) directly.

A ``Launcher`` keeps the tapes of up to ``TAPES`` pointer sets of its signature (a model's layers that share
one signature each have their own buffers), added by the Python side after a launch it recorded. A call
whose pointers have no tape returns ``(result, pointers, stream)``, and the Python side launches it as
before. A failed step is retried or raised by the tape's own Python loop (``Tape._python``), as in
``Tape.replay``.

Where no C compiler or no ``Python.h`` can be had, or ``TRACEA_NATIVE_LAUNCH=0``, ``launcher_type()`` is None
and the prepared call stays in Python; both do the same thing.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

TAPES = 16  # pointer sets (tapes) one Launcher keeps; the oldest is replaced first
MAX_PTRS = 16  # buffers of one launch (an op's inputs and its result)

LAUNCHER_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define TR_MAX_PTRS @MAX_PTRS@
#define TR_TAPES @TAPES@

typedef int (*tr_replay_fn)(const void* steps, int64_t n, void* stream, int64_t* failed);

typedef struct {
    uint64_t ptrs[TR_MAX_PTRS];
    const void* steps;   /* the tape's rows of tr_step */
    int64_t nsteps;
    PyObject* tape;      /* the Tape: keeps the rows alive; its _python(stream, at, rc) handles a failed step */
} tr_entry;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;                    /* pointers of a launch, in the kernel's order */
    Py_ssize_t slots[TR_MAX_PTRS];   /* where each comes from: an index into the call's arrays, -1 the result */
    PyObject* data_ptr;              /* torch.Tensor.data_ptr */
    PyObject* alloc;                 /* the result: alloc(arrays[alloc_at]), or alloc() where alloc_at < 0 */
    Py_ssize_t alloc_at;
    PyObject* stream;                /* the caller's current stream as an int: stream() */
    PyObject* stats;                 /* tracea.ops' counters (a dict): stats[counter] += 1 */
    PyObject* counter;
    PyObject* local;                 /* the thread-local holder of the last route: local.route = route */
    PyObject* route;
    tr_replay_fn replay;
    int ntapes, next;
    tr_entry tapes[TR_TAPES];
} Launcher;

static PyObject* ROUTE_NAME;

static int launcher_init(Launcher* self, PyObject* args, PyObject* kw) {
    PyObject *slots, *data_ptr, *alloc, *stream, *stats, *counter, *local, *route;
    Py_ssize_t alloc_at;
    unsigned long long replay;
    if (!PyArg_ParseTuple(args, "O!OOnOO!OOOK", &PyTuple_Type, &slots, &data_ptr, &alloc, &alloc_at, &stream,
                          &PyDict_Type, &stats, &counter, &local, &route, &replay))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    if (n < 1 || n > TR_MAX_PTRS || replay == 0) {
        PyErr_SetString(PyExc_ValueError, "Launcher: 1 to TR_MAX_PTRS slots and a replay function");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
        self->slots[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
        if (self->slots[i] == -1 && PyErr_Occurred())
            return -1;
    }
    self->n = n;
    Py_INCREF(data_ptr); Py_XSETREF(self->data_ptr, data_ptr);
    Py_INCREF(alloc); Py_XSETREF(self->alloc, alloc);
    Py_INCREF(stream); Py_XSETREF(self->stream, stream);
    Py_INCREF(stats); Py_XSETREF(self->stats, stats);
    Py_INCREF(counter); Py_XSETREF(self->counter, counter);
    Py_INCREF(local); Py_XSETREF(self->local, local);
    Py_INCREF(route); Py_XSETREF(self->route, route);
    self->alloc_at = alloc_at;
    self->replay = (tr_replay_fn)(uintptr_t)replay;
    return 0;
}

static void launcher_clear_tapes(Launcher* self) {
    for (int i = 0; i < self->ntapes; ++i)
        Py_CLEAR(self->tapes[i].tape);
    self->ntapes = self->next = 0;
}

static int launcher_traverse(Launcher* self, visitproc visit, void* arg) {
    Py_VISIT(self->data_ptr); Py_VISIT(self->alloc); Py_VISIT(self->stream); Py_VISIT(self->stats);
    Py_VISIT(self->counter); Py_VISIT(self->local); Py_VISIT(self->route);
    for (int i = 0; i < self->ntapes; ++i)
        Py_VISIT(self->tapes[i].tape);
    return 0;
}

static int launcher_gc_clear(Launcher* self) {
    launcher_clear_tapes(self);
    Py_CLEAR(self->data_ptr); Py_CLEAR(self->alloc); Py_CLEAR(self->stream); Py_CLEAR(self->stats);
    Py_CLEAR(self->counter); Py_CLEAR(self->local); Py_CLEAR(self->route);
    return 0;
}

static void launcher_dealloc(Launcher* self) {
    PyObject_GC_UnTrack(self);
    launcher_gc_clear(self);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

/* ptr = data_ptr(obj) as an unsigned 64-bit integer; -1 with an exception set on failure */
static int pointer_of(Launcher* self, PyObject* obj, uint64_t* ptr) {
    PyObject* p = PyObject_CallOneArg(self->data_ptr, obj);
    if (p == NULL)
        return -1;
    *ptr = (uint64_t)PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject* pointers_tuple(const uint64_t* ptrs, Py_ssize_t n) {
    PyObject* t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* v = PyLong_FromUnsignedLongLong(ptrs[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* stats[counter] += 1 and local.route = route, as the Python call does after a launch */
static int count_and_route(Launcher* self) {
    PyObject* old = PyDict_GetItemWithError(self->stats, self->counter);  /* borrowed */
    if (old == NULL && PyErr_Occurred())
        return -1;
    PyObject* one = PyLong_FromLong(1);
    PyObject* now = old == NULL ? one : PyNumber_Add(old, one);
    if (now == NULL) {
        Py_DECREF(one);
        return -1;
    }
    int rc = PyDict_SetItem(self->stats, self->counter, now);
    if (now != one)
        Py_DECREF(now);
    Py_DECREF(one);
    if (rc < 0)
        return -1;
    return PyObject_SetAttr(self->local, ROUTE_NAME, self->route);
}

/* launcher(arrays): the result, launched; or (result, pointers, stream) where no tape of these pointers is
   kept (the caller launches it and may add the tape) */
static PyObject* launcher_call(Launcher* self, PyObject* args, PyObject* kw) {
    PyObject* arrays;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Launcher(arrays) takes no keywords");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Launcher", 1, 1, &arrays))
        return NULL;
    if (!PyTuple_Check(arrays)) {
        PyErr_SetString(PyExc_TypeError, "Launcher(arrays): a tuple of the call's arrays");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(arrays);
    uint64_t ptrs[TR_MAX_PTRS];
    Py_ssize_t out_at = -1;
    for (Py_ssize_t i = 0; i < self->n; ++i) {
        Py_ssize_t s = self->slots[i];
        if (s < 0) {
            out_at = i;
            continue;
        }
        if (s >= count) {
            PyErr_SetString(PyExc_IndexError, "Launcher: a slot past the call's arrays");
            return NULL;
        }
        if (pointer_of(self, PyTuple_GET_ITEM(arrays, s), &ptrs[i]) < 0)
            return NULL;
    }
    PyObject* result;
    if (self->alloc_at >= 0) {
        if (self->alloc_at >= count) {
            PyErr_SetString(PyExc_IndexError, "Launcher: the allocation's array is past the call's arrays");
            return NULL;
        }
        result = PyObject_CallOneArg(self->alloc, PyTuple_GET_ITEM(arrays, self->alloc_at));
    } else {
        result = PyObject_CallNoArgs(self->alloc);
    }
    if (result == NULL)
        return NULL;
    if (out_at >= 0 && pointer_of(self, result, &ptrs[out_at]) < 0)
        goto fail;
    PyObject* s = PyObject_CallNoArgs(self->stream);
    if (s == NULL)
        goto fail;
    void* stream = PyLong_AsVoidPtr(s);
    Py_DECREF(s);
    if (stream == NULL && PyErr_Occurred())
        goto fail;
    for (int t = 0; t < self->ntapes; ++t) {
        tr_entry* e = &self->tapes[t];
        if (memcmp(e->ptrs, ptrs, (size_t)self->n * sizeof(uint64_t)) != 0)
            continue;
        int64_t failed = 0;
        int rc = self->replay(e->steps, e->nsteps, stream, &failed);
        if (rc != 0) {  /* the tape's Python loop: the context made current and the step again, or raised */
            PyObject* tape = e->tape;
            Py_INCREF(tape);
            PyObject* r = PyObject_CallMethod(tape, "_python", "(KLi)", (unsigned long long)(uintptr_t)stream,
                                              (long long)failed, rc);
            Py_DECREF(tape);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
        }
        if (count_and_route(self) < 0)
            goto fail;
        return result;
    }
    PyObject* key = pointers_tuple(ptrs, self->n);
    if (key == NULL)
        goto fail;
    PyObject* miss = Py_BuildValue("(NNK)", result, key, (unsigned long long)(uintptr_t)stream);
    return miss;
fail:
    Py_DECREF(result);
    return NULL;
}

/* add(pointers, tape, steps address, step count): replay this tape for calls on these pointers */
static PyObject* launcher_add(Launcher* self, PyObject* args) {
    PyObject *key, *tape;
    unsigned long long steps;
    long long nsteps;
    if (!PyArg_ParseTuple(args, "O!OKL", &PyTuple_Type, &key, &tape, &steps, &nsteps))
        return NULL;
    if (PyTuple_GET_SIZE(key) != self->n || steps == 0 || nsteps < 1) {
        PyErr_SetString(PyExc_ValueError, "Launcher.add: one pointer per slot and a tape of at least one step");
        return NULL;
    }
    uint64_t ptrs[TR_MAX_PTRS];
    for (Py_ssize_t i = 0; i < self->n; ++i) {
        ptrs[i] = (uint64_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(key, i));
        if (PyErr_Occurred())
            return NULL;
    }
    int at = -1;
    for (int t = 0; t < self->ntapes; ++t)
        if (memcmp(self->tapes[t].ptrs, ptrs, (size_t)self->n * sizeof(uint64_t)) == 0)
            at = t;
    if (at < 0) {
        if (self->ntapes < TR_TAPES) {
            at = self->ntapes++;
        } else {
            at = self->next;
            self->next = (self->next + 1) % TR_TAPES;
        }
    }
    tr_entry* e = &self->tapes[at];
    memcpy(e->ptrs, ptrs, (size_t)self->n * sizeof(uint64_t));
    e->steps = (const void*)(uintptr_t)steps;
    e->nsteps = (int64_t)nsteps;
    Py_INCREF(tape);
    Py_XSETREF(e->tape, tape);
    Py_RETURN_NONE;
}

static PyObject* launcher_tapes(Launcher* self, PyObject* unused) {
    return PyLong_FromLong(self->ntapes);
}

static PyObject* launcher_forget(Launcher* self, PyObject* unused) {
    launcher_clear_tapes(self);
    Py_RETURN_NONE;
}

static PyMethodDef launcher_methods[] = {
    {"add", (PyCFunction)launcher_add, METH_VARARGS, "add(pointers, tape, steps address, step count)"},
    {"tapes", (PyCFunction)launcher_tapes, METH_NOARGS, "how many pointer sets have a tape"},
    {"forget", (PyCFunction)launcher_forget, METH_NOARGS, "drop every tape"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracea_prepared_call.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A prepared tracea.ops call on CUDA tensors: Launcher(slots, data_ptr, alloc, alloc_at, stream, "
              "stats, counter, local, route, replay address)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)launcher_init,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_gc_clear,
    .tp_call = (ternaryfunc)launcher_call,
    .tp_methods = launcher_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tracea_prepared_call", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_tracea_prepared_call(void) {
    if (PyType_Ready(&LauncherType) < 0)
        return NULL;
    ROUTE_NAME = PyUnicode_InternFromString("route");
    if (ROUTE_NAME == NULL)
        return NULL;
    PyObject* m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LauncherType);
    if (PyModule_AddObject(m, "Launcher", (PyObject*)&LauncherType) < 0) {
        Py_DECREF(&LauncherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
""".replace("@MAX_PTRS@", str(MAX_PTRS)).replace("@TAPES@", str(TAPES))

_TYPE: list[Any] = []  # [Launcher, or None where it cannot be had]


def launcher_type() -> Any:
    """The compiled ``Launcher`` type (built once into the compile cache), or None: no C compiler, no
    ``Python.h`` for this interpreter, a failed build, or ``TRACEA_NATIVE_LAUNCH=0``."""
    if not _TYPE:
        _TYPE.append(_build() if os.environ.get("TRACEA_NATIVE_LAUNCH", "1") != "0" else None)
    return _TYPE[0]


def _build() -> Any:
    include = sysconfig.get_paths().get("include") or ""
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return None
    try:
        import importlib.machinery
        import importlib.util

        from tracea.emitters.host_compiler import compile_cached, find_compiler

        # the interpreter in the source too: an extension module is built for one Python version and ABI
        source = f"/* {sys.implementation.cache_tag} {sys.version.split()[0]} {include} */\n" + LAUNCHER_C
        path, _, _ = compile_cached(source, "tracea_prepared_call",
                                    ["-O2", "-shared", "-fPIC", "-std=c11", "-fno-strict-aliasing", f"-I{include}"],
                                    find_compiler())
        loader = importlib.machinery.ExtensionFileLoader("tracea_prepared_call", str(path))
        spec = importlib.util.spec_from_file_location("tracea_prepared_call", str(path), loader=loader)
        if spec is None:
            return None
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod.Launcher
    except Exception:  # noqa: BLE001 - any failure leaves the Python call, which is correct, only slower
        return None
