/* Memory-mapped tensor files that cannot kill the process when they are cut short under it.
 *
 * tui-acc maps settled tensor files (tui_acc/dumps/mapped/__init__.py map_bytes: the storages of
 * torchfile/reader.py, .bin payloads, .npy arrays) so that a large tensor is paged in, not copied.
 * When another process truncates such a file in place (torch.save rewriting it, a dumper run again
 * into the same folder) while it is being read, the kernel raises SIGBUS on the next access past
 * the new end, and SIGBUS cannot be caught from Python: its handler would run only after the
 * faulting instruction, which faults again, forever.
 *
 * `Mapping(fd, offset, length)` maps the range copy-on-write (as numpy's memmap mode "c") and
 * exports it as a buffer (np.frombuffer); while it lives its pages are registered here. On SIGBUS
 * at an address inside a registered mapping, the handler maps anonymous zero pages over the rest
 * of that mapping and returns: the access is retried and reads zeros, and `absorbed()` counts it.
 * The file's size and time then differ from when it was opened, which the engine checks after each
 * comparison (loading.changed_since): the row is an error naming the file as changed while being
 * read, its numbers never shown or cached. A SIGBUS anywhere else goes to the disposition that was
 * there before ours (the default: the process ends, as it would have).
 *
 * The handler touches no Python object and takes no lock: it reads the slot table (atomics) and
 * calls mmap. The table is written only by Python code holding the GIL.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOTS 4096 /* mappings alive at once; past it map_bytes reads instead */

typedef struct {
    _Atomic uintptr_t start; /* 0: a free slot */
    _Atomic uintptr_t end;
} Range;

static Range ranges[SLOTS];
static _Atomic long absorbed_faults;
static struct sigaction previous;
static int installed;
static uintptr_t page_size;

static void
pass_on(int signum, siginfo_t *info, void *context)
{
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(signum, info, context);
        return;
    }
    if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        /* the fault is retried on return and, with the default restored, ends the process */
        sigaction(SIGBUS, &previous, NULL);
        return;
    }
    previous.sa_handler(signum);
}

static void
on_sigbus(int signum, siginfo_t *info, void *context)
{
    uintptr_t address = (uintptr_t)info->si_addr;
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t start = atomic_load_explicit(&ranges[i].start, memory_order_acquire);
        if (start == 0 || address < start) {
            continue;
        }
        uintptr_t end = atomic_load_explicit(&ranges[i].end, memory_order_acquire);
        if (address >= end) {
            continue;
        }
        uintptr_t page = address & ~(page_size - 1);
        void *zeros = mmap((void *)page, end - page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (zeros != MAP_FAILED) {
            atomic_fetch_add_explicit(&absorbed_faults, 1, memory_order_relaxed);
            return;
        }
        break;
    }
    pass_on(signum, info, context);
}

static int
install(void)
{
    if (installed) {
        return 0;
    }
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous) != 0) {
        return -1;
    }
    installed = 1;
    return 0;
}

static int
watch(uintptr_t start, uintptr_t end)
{
    for (int i = 0; i < SLOTS; i++) {
        if (atomic_load_explicit(&ranges[i].start, memory_order_relaxed) == 0) {
            atomic_store_explicit(&ranges[i].end, end, memory_order_release);
            atomic_store_explicit(&ranges[i].start, start, memory_order_release);
            return i;
        }
    }
    return -1;
}

static void
unwatch(int slot)
{
    atomic_store_explicit(&ranges[slot].start, 0, memory_order_release);
    atomic_store_explicit(&ranges[slot].end, 0, memory_order_release);
}

/* --- Mapping: the buffer numpy views ------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *base;    /* the mapping, page-aligned */
    size_t mapped; /* its length */
    char *data;    /* the range asked for, inside it */
    Py_ssize_t length;
    int slot;
} Mapping;

static PyObject *
Mapping_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    int fd;
    long long offset;
    Py_ssize_t length;
    static char *keywords[] = {"fd", "offset", "length", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iLn", keywords, &fd, &offset, &length)) {
        return NULL;
    }
    if (offset < 0 || length <= 0) {
        PyErr_SetString(PyExc_ValueError, "a mapping needs a non-negative offset and a positive length");
        return NULL;
    }
    if (install() != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    long long aligned = offset - (long long)((unsigned long long)offset % page_size);
    size_t mapped = (size_t)(offset - aligned) + (size_t)length;
    void *base = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)aligned);
    if (base == MAP_FAILED) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int slot = watch((uintptr_t)base, (uintptr_t)base + mapped);
    if (slot < 0) {
        munmap(base, mapped);
        PyErr_SetString(PyExc_MemoryError, "every guarded mapping slot is taken");
        return NULL;
    }
    Mapping *self = (Mapping *)type->tp_alloc(type, 0);
    if (self == NULL) {
        unwatch(slot);
        munmap(base, mapped);
        return NULL;
    }
    self->base = base;
    self->mapped = mapped;
    self->data = (char *)base + (offset - aligned);
    self->length = length;
    self->slot = slot;
    return (PyObject *)self;
}

static void
Mapping_dealloc(Mapping *self)
{
    if (self->base != NULL) {
        unwatch(self->slot); /* first: no window where another mapping there would count as ours */
        munmap(self->base, self->mapped);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Mapping_getbuffer(Mapping *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->length, 0, flags);
}

static PyBufferProcs Mapping_as_buffer = {
    .bf_getbuffer = (getbufferproc)Mapping_getbuffer,
};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tui_acc.dumps.mapped._mapguard.Mapping",
    .tp_doc = PyDoc_STR("A file range mapped copy-on-write, guarded against the file shrinking."),
    .tp_basicsize = sizeof(Mapping),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Mapping_new,
    .tp_dealloc = (destructor)Mapping_dealloc,
    .tp_as_buffer = &Mapping_as_buffer,
};

static PyObject *
absorbed(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(atomic_load(&absorbed_faults));
}

static PyMethodDef methods[] = {
    {"absorbed", absorbed, METH_NOARGS, "How many SIGBUS faults in guarded mappings were turned into zeros."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_mapguard",
    .m_doc = "Memory mappings guarded against SIGBUS.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__mapguard(void)
{
    long size = sysconf(_SC_PAGESIZE);
    page_size = size > 0 ? (uintptr_t)size : 4096;
    if (PyType_Ready(&MappingType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Mapping", (PyObject *)&MappingType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
