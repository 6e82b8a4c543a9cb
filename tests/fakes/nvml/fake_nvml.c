/*
 * A fake libnvidia-ml.so.1 for tests: the NVML C functions nvidia-ml-py (pynvml) calls for what the
 * agent reads, answering from a JSON file so that a GPU-less CI machine runs the real ctypes path.
 *
 * The file is named by $FAKE_NVML_STATE and re-read whenever it changes (inode, size or mtime: write a
 * new file and rename it over the old one), so a test can change the GPUs while the agent runs.
 * Schema (tests/fakes/nvml.py documents it too):
 *
 *   {"driver": "550.54.15", "cuda_driver_version": 12040, "init_error": null | "DRIVER_NOT_LOADED",
 *    "devices": [{"name", "uuid", "minor", "mem_total_mib", "mem_used_mib", "util", "mem_util", "temp",
 *                 "power_mw", "power_limit_mw", "sm_clock", "mem_clock", "fan",
 *                 "error": null | "GPU_IS_LOST" | ...,   every dynamic query of the device fails with it
 *                 "not_supported": ["fan", ...],          those queries answer NVML_ERROR_NOT_SUPPORTED
 *                 "processes": [{"pid", "mem_mib"}],      mem_mib null: NVML_VALUE_NOT_AVAILABLE
 *                 "mig": null | {"instances": [{"profile", "mem_total_mib", "mem_used_mib", "processes"}]}}]}
 *
 * Behaviour copied from the real library where tests depend on it: calls before init answer
 * UNINITIALIZED; "init_error" makes nvmlInit* fail (and, set later, every call); a device whose index is
 * gone from the file is GPU_IS_LOST; MIG mode is NOT_SUPPORTED when "mig" is in not_supported, else
 * enabled iff "mig" is an object; a MIG-enabled parent answers NOT_SUPPORTED for utilization, lists
 * every instance's processes (with their gpuInstanceId) and has up to max(7, n) MIG slots, empty ones
 * NOT_FOUND; processes outside MIG carry gpuInstanceId = computeInstanceId = 0xFFFFFFFF.
 * Build with -DFAKE_NVML_NO_V3 for a driver older than nvmlDeviceGetComputeRunningProcesses_v3.
 * No external libraries: a small JSON parser is below.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

static const struct { const char *name; int code; const char *text; } ERRORS[] = {
    {"SUCCESS", 0, "Success"},
    {"UNINITIALIZED", 1, "Uninitialized"},
    {"INVALID_ARGUMENT", 2, "Invalid Argument"},
    {"NOT_SUPPORTED", 3, "Not Supported"},
    {"NO_PERMISSION", 4, "Insufficient Permissions"},
    {"ALREADY_INITIALIZED", 5, "Already Initialized"},
    {"NOT_FOUND", 6, "Not Found"},
    {"INSUFFICIENT_SIZE", 7, "Insufficient Size"},
    {"INSUFFICIENT_POWER", 8, "Insufficient External Power"},
    {"DRIVER_NOT_LOADED", 9, "Driver Not Loaded"},
    {"TIMEOUT", 10, "Timeout"},
    {"IRQ_ISSUE", 11, "Interrupt Request Issue"},
    {"LIBRARY_NOT_FOUND", 12, "NVML Shared Library Not Found"},
    {"FUNCTION_NOT_FOUND", 13, "Function Not Found"},
    {"CORRUPTED_INFOROM", 14, "Corrupted infoROM"},
    {"GPU_IS_LOST", 15, "GPU is lost"},
    {"RESET_REQUIRED", 16, "GPU requires restart"},
    {"OPERATING_SYSTEM", 17, "The operating system has blocked the request."},
    {"LIB_RM_VERSION_MISMATCH", 18, "RM has detected an NVML/RM version mismatch."},
    {"IN_USE", 19, "In use by another client"},
    {"MEMORY", 20, "Insufficient Memory"},
    {"NO_DATA", 21, "No data"},
    {"VGPU_ECC_NOT_SUPPORTED", 22, "The requested vgpu operation is not available on target device, becasue ECC is enabled"},
    {"INSUFFICIENT_RESOURCES", 23, "Ran out of critical resources, other than memory"},
    {"FREQ_NOT_SUPPORTED", 24, "The requested frequency is not supported"},
    {"ARGUMENT_VERSION_MISMATCH", 25, "The provided version is invalid/unsupported"},
    {"DEPRECATED", 26, "The requested functionality has been deprecated"},
    {"NOT_READY", 27, "The system is not ready for the request"},
    {"GPU_NOT_FOUND", 28, "The GPU was not found"},
    {"INVALID_STATE", 29, "The GPU is in an invalid state"},
    {"UNKNOWN", 999, "Unknown Error"},
};
#define N_ERRORS (sizeof(ERRORS) / sizeof(ERRORS[0]))

/* ---- a small JSON parser (objects, arrays, strings, numbers, true/false/null) ------------------------ */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
typedef struct jv {
    int type;
    double num;
    char *str;
    int n;
    char **keys;        /* J_OBJ */
    struct jv **items;  /* J_ARR and J_OBJ values */
} jv;

typedef struct { const char *p; int err; } jp;

static void jfree(jv *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        if (v->keys) free(v->keys[i]);
        jfree(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->str);
    free(v);
}

static void ws(jp *s) { while (*s->p && isspace((unsigned char)*s->p)) s->p++; }

static char *jstring(jp *s) {
    /* s->p is at the opening quote; \uXXXX escapes outside ASCII become '?' (enough for our names) */
    size_t cap = 32, len = 0;
    char *out = malloc(cap);
    s->p++;
    while (*s->p && *s->p != '"') {
        char c = *s->p++;
        if (c == '\\') {
            char e = *s->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4 && isxdigit((unsigned char)*s->p); i++, s->p++)
                    v = v * 16 + (unsigned)(isdigit((unsigned char)*s->p) ? *s->p - '0' : (tolower(*s->p) - 'a' + 10));
                c = v < 128 ? (char)v : '?';
                break;
            }
            case '\0': s->err = 1; free(out); return NULL;
            default: c = e;
            }
        }
        if (len + 2 > cap) out = realloc(out, cap *= 2);
        out[len++] = c;
    }
    if (*s->p != '"') { s->err = 1; free(out); return NULL; }
    s->p++;
    out[len] = '\0';
    return out;
}

static jv *jvalue(jp *s, int depth);

static void jpush(jv *v, char *key, jv *item) {
    v->items = realloc(v->items, sizeof(jv *) * (size_t)(v->n + 1));
    if (v->type == J_OBJ) {
        v->keys = realloc(v->keys, sizeof(char *) * (size_t)(v->n + 1));
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
}

static jv *jvalue(jp *s, int depth) {
    ws(s);
    if (depth > 32) { s->err = 1; return NULL; }
    jv *v = calloc(1, sizeof(jv));
    char c = *s->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        v->type = c == '{' ? J_OBJ : J_ARR;
        s->p++;
        ws(s);
        if (*s->p == close) { s->p++; return v; }
        for (;;) {
            char *key = NULL;
            ws(s);
            if (v->type == J_OBJ) {
                if (*s->p != '"' || !(key = jstring(s))) { s->err = 1; jfree(v); return NULL; }
                ws(s);
                if (*s->p++ != ':') { s->err = 1; free(key); jfree(v); return NULL; }
            }
            jv *item = jvalue(s, depth + 1);
            if (!item) { free(key); jfree(v); return NULL; }
            jpush(v, key, item);
            ws(s);
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == close) { s->p++; return v; }
            s->err = 1;
            jfree(v);
            return NULL;
        }
    }
    if (c == '"') {
        v->type = J_STR;
        if (!(v->str = jstring(s))) { free(v); return NULL; }
        return v;
    }
    if (!strncmp(s->p, "null", 4)) { s->p += 4; v->type = J_NULL; return v; }
    if (!strncmp(s->p, "true", 4)) { s->p += 4; v->type = J_BOOL; v->num = 1; return v; }
    if (!strncmp(s->p, "false", 5)) { s->p += 5; v->type = J_BOOL; return v; }
    char *end;
    v->num = strtod(s->p, &end);
    if (end == s->p) { s->err = 1; free(v); return NULL; }
    v->type = J_NUM;
    s->p = end;
    return v;
}

static jv *jget(const jv *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

static jv *jat(const jv *arr, int i) {
    if (!arr || arr->type != J_ARR || i < 0 || i >= arr->n) return NULL;
    return arr->items[i];
}

static int jlen(const jv *arr) { return arr && arr->type == J_ARR ? arr->n : 0; }

static const char *jstr(const jv *obj, const char *key) {
    jv *v = jget(obj, key);
    return v && v->type == J_STR ? v->str : NULL;
}

static int jhas_num(const jv *obj, const char *key) {
    jv *v = jget(obj, key);
    return v && v->type == J_NUM;
}

static double jnum(const jv *obj, const char *key, double dflt) {
    jv *v = jget(obj, key);
    return v && (v->type == J_NUM || v->type == J_BOOL) ? v->num : dflt;
}

/* ---- state -------------------------------------------------------------------------------------------- */

#define MAX_DEVICES 64
#define MAX_MIG 16
#define MIB 1048576ULL
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL

typedef struct { int index; int mig; } fake_handle; /* mig: 0 = the GPU, k > 0 = its MIG device k-1 */
typedef fake_handle *nvmlDevice_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static jv *state;
static struct stat state_stat;
static char state_path[4096];
static int init_count;
static fake_handle handles[MAX_DEVICES][MAX_MIG + 1];

static void refresh(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat st;
    if (!path || stat(path, &st) != 0) return; /* keep the last state read */
    if (state && !strcmp(path, state_path) && st.st_ino == state_stat.st_ino && st.st_size == state_stat.st_size &&
        st.st_mtim.tv_sec == state_stat.st_mtim.tv_sec && st.st_mtim.tv_nsec == state_stat.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    buf[got] = '\0';
    jp s = {buf, 0};
    jv *parsed = jvalue(&s, 0);
    free(buf);
    if (!parsed || s.err || parsed->type != J_OBJ) {
        jfree(parsed);
        fprintf(stderr, "fake libnvidia-ml: %s is not a JSON object; keeping the previous state\n", path);
        return;
    }
    jfree(state);
    state = parsed;
    state_stat = st;
    snprintf(state_path, sizeof state_path, "%s", path);
}

static int error_code(const char *name) {
    if (!name) return NVML_SUCCESS;
    if (!strncmp(name, "NVML_ERROR_", 11)) name += 11;
    for (size_t i = 0; i < N_ERRORS; i++)
        if (!strcmp(ERRORS[i].name, name)) return ERRORS[i].code;
    return NVML_ERROR_UNKNOWN;
}

static jv *devices(void) { return jget(state, "devices"); }

static jv *device_at(int index) { return jat(devices(), index); }

/* Whether `what` (one of the device's field names, or an alias) is listed in its "not_supported". */
static int unsupported(const jv *dev, const char *what) {
    jv *list = jget(dev, "not_supported");
    for (int i = 0; i < jlen(list); i++) {
        jv *v = list->items[i];
        if (v->type == J_STR && !strcmp(v->str, what)) return 1;
    }
    return 0;
}

static jv *mig_of(const jv *dev) {
    jv *mig = jget(dev, "mig");
    return mig && mig->type == J_OBJ ? mig : NULL;
}

static jv *instances_of(const jv *dev) { return jget(mig_of(dev), "instances"); }

/*
 * Common entry of every device call: the library is initialized, no system error is set, the handle is
 * one of ours and its device (and MIG instance) still exists. `dynamic`: the device's "error" applies.
 */
static nvmlReturn_t enter(nvmlDevice_t h, int dynamic, jv **dev, jv **inst) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    refresh();
    int sys = error_code(jstr(state, "init_error"));
    if (sys) return sys;
    uintptr_t at = (uintptr_t)h, base = (uintptr_t)handles;
    if (at < base || at >= base + sizeof handles || (at - base) % sizeof(fake_handle))
        return NVML_ERROR_INVALID_ARGUMENT;
    *dev = device_at(h->index);
    if (!*dev) return NVML_ERROR_GPU_IS_LOST;
    if (dynamic) {
        int err = error_code(jstr(*dev, "error"));
        if (err) return err;
    }
    *inst = NULL;
    if (h->mig) {
        *inst = jat(instances_of(*dev), h->mig - 1);
        if (!*inst) return NVML_ERROR_NOT_FOUND;
    }
    return NVML_SUCCESS;
}

#define ENTER(h, dynamic)                                   \
    jv *dev = NULL, *inst = NULL;                           \
    pthread_mutex_lock(&lock);                              \
    nvmlReturn_t rc = enter(h, dynamic, &dev, &inst);       \
    (void)inst;                                             \
    if (rc) goto out;

#define LEAVE \
    out:      \
    pthread_mutex_unlock(&lock); \
    return rc;

static nvmlReturn_t copy_string(const char *value, char *buf, unsigned len) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, value);
    return NVML_SUCCESS;
}

/* ---- init, system ------------------------------------------------------------------------------------- */

static nvmlReturn_t do_init(void) {
    pthread_mutex_lock(&lock);
    refresh();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (!state) {
        fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_STATE unset or unreadable (%s)\n",
                getenv("FAKE_NVML_STATE") ? getenv("FAKE_NVML_STATE") : "unset");
        rc = NVML_ERROR_UNKNOWN;
    } else {
        rc = error_code(jstr(state, "init_error"));
    }
    if (!rc) init_count++;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlInit(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return do_init(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = init_count ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count) init_count--;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < N_ERRORS; i++)
        if (ERRORS[i].code == result) return ERRORS[i].text;
    return "Unknown Error";
}

static nvmlReturn_t enter_system(void) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    refresh();
    return error_code(jstr(state, "init_error"));
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned len) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc) {
        const char *driver = jstr(state, "driver");
        rc = copy_string(driver ? driver : "550.54.15", version, len);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned len) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc) {
        char text[96];
        const char *driver = jstr(state, "driver");
        snprintf(text, sizeof text, "%d.%s", (int)jnum(state, "cuda_driver_version", 12040) / 1000,
                 driver ? driver : "550.54.15");
        rc = copy_string(text, version, len);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static nvmlReturn_t cuda_version(int *out) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc && !out) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) *out = (int)jnum(state, "cuda_driver_version", 12040);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return cuda_version(v); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return cuda_version(v); }

/* ---- devices ------------------------------------------------------------------------------------------ */

static nvmlReturn_t device_count(unsigned *count) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc && !count) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        int n = jlen(devices());
        *count = (unsigned)(n > MAX_DEVICES ? MAX_DEVICES : n);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *count) { return device_count(count); }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) { return device_count(count); }

static nvmlReturn_t handle_by_index(unsigned index, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc && (!device || index >= MAX_DEVICES || !device_at((int)index))) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        handles[index][0].index = (int)index;
        *device = &handles[index][0];
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) { return handle_by_index(i, d); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) { return handle_by_index(i, d); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc && (!uuid || !device)) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        rc = NVML_ERROR_NOT_FOUND;
        for (int i = 0; i < jlen(devices()) && i < MAX_DEVICES; i++) {
            const char *u = jstr(device_at(i), "uuid");
            if (u && !strcmp(u, uuid)) {
                handles[i][0].index = i;
                *device = &handles[i][0];
                rc = NVML_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned *index) {
    ENTER(h, 0)
    if (!index) rc = NVML_ERROR_INVALID_ARGUMENT;
    else *index = (unsigned)h->index;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned len) {
    ENTER(h, 0)
    const char *base = jstr(dev, "name");
    if (!base) base = "NVIDIA Fake GPU";
    if (inst) {
        char text[160];
        const char *profile = jstr(inst, "profile");
        snprintf(text, sizeof text, "%s MIG %s", base, profile ? profile : "1g.10gb");
        rc = copy_string(text, name, len);
    } else {
        rc = copy_string(base, name, len);
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len) {
    ENTER(h, 0)
    char text[96];
    const char *u = jstr(dev, "uuid");
    if (!u) {
        snprintf(text, sizeof text, "GPU-00000000-0000-0000-0000-%012d", h->index);
        u = text;
    }
    if (inst) {
        char mig[128];
        snprintf(mig, sizeof mig, "MIG-%.8s-0000-0000-0000-%012d", strncmp(u, "GPU-", 4) ? u : u + 4, h->mig);
        rc = copy_string(mig, uuid, len);
    } else {
        rc = copy_string(u, uuid, len);
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned *minor) {
    ENTER(h, 0)
    if (!minor) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, "minor")) rc = NVML_ERROR_NOT_SUPPORTED;
    else *minor = (unsigned)jnum(dev, "minor", h->index);
    LEAVE
}

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *util) {
    ENTER(h, 1)
    if (!util) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || mig_of(dev) || unsupported(dev, "util") || unsupported(dev, "mem_util"))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else {
        util->gpu = (unsigned)jnum(dev, "util", 0);
        util->memory = (unsigned)jnum(dev, "mem_util", 0);
    }
    LEAVE
}

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
#define NVML_MEMORY_V2 0x02000028u

static nvmlReturn_t memory(const jv *dev, const jv *inst, unsigned long long *total, unsigned long long *used) {
    if (unsupported(dev, "memory") || unsupported(dev, "mem_used_mib") || unsupported(dev, "mem_total_mib"))
        return NVML_ERROR_NOT_SUPPORTED;
    const jv *src = inst ? inst : dev;
    *total = (unsigned long long)jnum(src, "mem_total_mib", 0) * MIB;
    *used = (unsigned long long)jnum(src, "mem_used_mib", 0) * MIB;
    if (*used > *total) *used = *total;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *mem) {
    ENTER(h, 1)
    unsigned long long total = 0, used = 0;
    if (!mem) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = memory(dev, inst, &total, &used))) {
        mem->total = total;
        mem->used = used;
        mem->free = total - used;
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *mem) {
    ENTER(h, 1)
    unsigned long long total = 0, used = 0;
    if (!mem) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (mem->version != NVML_MEMORY_V2) rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (!(rc = memory(dev, inst, &total, &used))) {
        mem->total = total;
        mem->reserved = 0;
        mem->used = used;
        mem->free = total - used;
    }
    LEAVE
}

/* One unsigned field of a (non-MIG) device: NOT_SUPPORTED when listed, missing, or asked of a MIG device. */
static nvmlReturn_t uint_field(nvmlDevice_t h, const char *field, const char *alias, unsigned *out) {
    ENTER(h, 1)
    if (!out) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, field) || (alias && unsupported(dev, alias)) || !jhas_num(dev, field))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else *out = (unsigned)jnum(dev, field, 0);
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *temp) {
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_field(h, "temp", NULL, temp);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *mw) {
    return uint_field(h, "power_mw", "power", mw);
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned *mw) {
    return uint_field(h, "power_limit_mw", "power_limit", mw);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned *mw) {
    return uint_field(h, "power_limit_mw", "power_limit", mw);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned *speed) {
    return uint_field(h, "fan", NULL, speed);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t h, unsigned fan, unsigned *speed) {
    if (fan != 0) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_field(h, "fan", NULL, speed);
}

EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t h, unsigned *n) {
    ENTER(h, 1)
    if (!n) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, "fan") || !jhas_num(dev, "fan")) rc = NVML_ERROR_NOT_SUPPORTED;
    else *n = 1;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *clock) {
    switch (type) {
    case 0: /* graphics */
    case 1: return uint_field(h, "sm_clock", "clocks", clock);
    case 2: return uint_field(h, "mem_clock", "clocks", clock);
    case 3: return uint_field(h, "sm_clock", "clocks", clock); /* video: close enough */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

/* ---- processes ---------------------------------------------------------------------------------------- */

typedef struct { unsigned pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t; /* also v3's layout */

typedef struct { unsigned pid; unsigned long long mem; unsigned gi; } proc_row;

/* The rows this handle reports: a MIG device its instance's, a GPU its own plus every instance's. */
static int collect(const jv *dev, const jv *inst, int mig_index, proc_row *rows, int cap) {
    int n = 0;
    const jv *sources[MAX_MIG + 1];
    unsigned gis[MAX_MIG + 1];
    int ns = 0;
    if (inst) {
        sources[ns] = inst;
        gis[ns++] = (unsigned)mig_index;
    } else {
        sources[ns] = dev;
        gis[ns++] = 0xFFFFFFFFu;
        jv *instances = instances_of(dev);
        for (int i = 0; i < jlen(instances) && ns <= MAX_MIG; i++) {
            sources[ns] = instances->items[i];
            gis[ns++] = (unsigned)(i + 1);
        }
    }
    for (int s = 0; s < ns; s++) {
        jv *procs = jget(sources[s], "processes");
        for (int i = 0; i < jlen(procs) && n < cap; i++) {
            jv *p = procs->items[i];
            rows[n].pid = (unsigned)jnum(p, "pid", 0);
            rows[n].mem = jhas_num(p, "mem_mib") ? (unsigned long long)jnum(p, "mem_mib", 0) * MIB : NOT_AVAILABLE;
            rows[n].gi = gis[s];
            n++;
        }
    }
    return n;
}

#define MAX_PROCS 1024

/* The NVML sizing protocol: *count in = room in infos, out = rows; INSUFFICIENT_SIZE when it is short. */
static nvmlReturn_t processes(nvmlDevice_t h, unsigned *count, void *infos, int version) {
    ENTER(h, 1)
    static proc_row rows[MAX_PROCS];
    if (!count) { rc = NVML_ERROR_INVALID_ARGUMENT; goto out; }
    if (unsupported(dev, "processes")) { rc = NVML_ERROR_NOT_SUPPORTED; goto out; }
    int n = collect(dev, inst, h->mig, rows, MAX_PROCS);
    if ((unsigned)n > *count || (n > 0 && !infos)) {
        *count = (unsigned)n;
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
        goto out;
    }
    *count = (unsigned)n;
    for (int i = 0; i < n; i++) {
        if (version == 1) {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
            p->pid = rows[i].pid;
            p->usedGpuMemory = rows[i].mem;
        } else {
            nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
            p->pid = rows[i].pid;
            p->usedGpuMemory = rows[i].mem;
            p->gpuInstanceId = rows[i].gi;
            p->computeInstanceId = rows[i].gi == 0xFFFFFFFFu ? 0xFFFFFFFFu : 0;
        }
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned *c, void *p) {
    return processes(h, c, p, 1);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned *c, void *p) {
    return processes(h, c, p, 2);
}
#ifndef FAKE_NVML_NO_V3
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *c, void *p) {
    return processes(h, c, p, 3);
}
#endif

/* No graphics processes on these boxes: the right answer for an empty list is SUCCESS with count 0. */
static nvmlReturn_t no_processes(nvmlDevice_t h, unsigned *count) {
    ENTER(h, 1)
    if (!count) rc = NVML_ERROR_INVALID_ARGUMENT;
    else *count = 0;
    LEAVE
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t h, unsigned *c, void *p) {
    (void)p;
    return no_processes(h, c);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned *c, void *p) {
    (void)p;
    return no_processes(h, c);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned *c, void *p) {
    (void)p;
    return no_processes(h, c);
}

/* ---- MIG ---------------------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *current, unsigned *pending) {
    ENTER(h, 1)
    if (!current || !pending) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, "mig")) rc = NVML_ERROR_NOT_SUPPORTED;
    else *current = *pending = mig_of(dev) ? 1 : 0;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned *count) {
    ENTER(h, 1)
    if (!count) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, "mig")) rc = NVML_ERROR_NOT_SUPPORTED;
    else {
        int n = jlen(instances_of(dev));
        *count = mig_of(dev) ? (unsigned)(n > 7 ? (n > MAX_MIG ? MAX_MIG : n) : 7) : 0;
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned index, nvmlDevice_t *mig) {
    ENTER(h, 1)
    if (!mig || inst) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (unsupported(dev, "mig")) rc = NVML_ERROR_NOT_SUPPORTED;
    else if (!mig_of(dev) || index >= MAX_MIG) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!jat(instances_of(dev), (int)index)) rc = NVML_ERROR_NOT_FOUND;
    else {
        fake_handle *out = &handles[h->index][index + 1];
        out->index = h->index;
        out->mig = (int)index + 1;
        *mig = out;
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned *is_mig) {
    ENTER(h, 0)
    if (!is_mig) rc = NVML_ERROR_INVALID_ARGUMENT;
    else *is_mig = h->mig ? 1 : 0;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t h, nvmlDevice_t *parent) {
    ENTER(h, 0)
    if (!parent || !inst) rc = NVML_ERROR_INVALID_ARGUMENT;
    else *parent = &handles[h->index][0];
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned *id) {
    ENTER(h, 0)
    if (!id) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!inst) rc = NVML_ERROR_NOT_SUPPORTED;
    else *id = (unsigned)h->mig;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned *id) {
    ENTER(h, 0)
    if (!id) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!inst) rc = NVML_ERROR_NOT_SUPPORTED;
    else *id = 0;
    LEAVE
}

/* ---- health (issue 30): ECC, retired pages, remapped rows, clock event reasons, PCIe, pstate, NVLink ------
 *
 * Each reads an optional key of the device; a missing key (a consumer card) or a name in "not_supported"
 * answers NOT_SUPPORTED, a name in "no_permission" NO_PERMISSION (a container):
 *   "ecc_mode": bool, "ecc": {"volatile": {"corrected", "uncorrected"}, "aggregate": {...}},
 *   "retired_pages": {"sbe", "dbe", "pending": bool}, "remapped_rows": {"corrected", "uncorrected", "pending",
 *   "failure"}, "clock_events": ["sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake",
 *   "gpu_idle", ...], "pcie": {"gen", "width", "max_gen", "max_width", "replays"}, "pstate": n,
 *   "persistence": bool, "nvlink": [1, 0, ...] (link states), "xids": [{"xid": 79, "pending": bool}].
 * Names for not_supported / no_permission: ecc, retired_pages, remapped_rows, clock_events, pcie, pstate,
 * persistence, nvlink, events.
 */

static int denied(const jv *dev, const char *what) {
    jv *list = jget(dev, "no_permission");
    for (int i = 0; i < jlen(list); i++) {
        jv *v = list->items[i];
        if (v->type == J_STR && !strcmp(v->str, what)) return 1;
    }
    return 0;
}

/* The device's object (or value) under `key` for a health query, or the error to answer. */
static nvmlReturn_t health_key(const jv *dev, const jv *inst, const char *group, const char *key, jv **out) {
    if (inst) return NVML_ERROR_NOT_SUPPORTED;
    if (denied(dev, group)) return NVML_ERROR_NO_PERMISSION;
    if (unsupported(dev, group)) return NVML_ERROR_NOT_SUPPORTED;
    *out = jget(dev, key);
    if (!*out || (*out)->type == J_NULL) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t h, int *current, int *pending) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!current || !pending) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "ecc", "ecc_mode", &v))) *current = *pending = v->num != 0;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int error_type, int counter_type,
                                                 unsigned long long *count) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!count || error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "ecc", "ecc", &v))) {
        jv *group = jget(v, counter_type ? "aggregate" : "volatile");
        *count = (unsigned long long)jnum(group, error_type ? "uncorrected" : "corrected", 0);
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t h, int cause, unsigned *count,
                                               unsigned long long *addresses) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!count || cause < 0 || cause > 1) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "retired_pages", "retired_pages", &v))) {
        unsigned n = (unsigned)jnum(v, cause ? "dbe" : "sbe", 0);
        if (n > *count || (n && !addresses)) rc = NVML_ERROR_INSUFFICIENT_SIZE;
        else for (unsigned i = 0; i < n; i++) addresses[i] = 0x1000ULL * (i + 1) + (unsigned long long)cause;
        *count = n;
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t h, int *pending) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!pending) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "retired_pages", "retired_pages", &v)))
        *pending = jnum(v, "pending", 0) != 0;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned *corr, unsigned *unc, unsigned *pending,
                                               unsigned *failure) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!corr || !unc || !pending || !failure) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "remapped_rows", "remapped_rows", &v))) {
        *corr = (unsigned)jnum(v, "corrected", 0);
        *unc = (unsigned)jnum(v, "uncorrected", 0);
        *pending = jnum(v, "pending", 0) != 0;
        *failure = jnum(v, "failure", 0) != 0;
    }
    LEAVE
}

static const struct { const char *name; unsigned long long bit; } REASONS[] = {
    {"gpu_idle", 0x1}, {"applications_clocks", 0x2}, {"sw_power_cap", 0x4}, {"hw_slowdown", 0x8},
    {"sync_boost", 0x10}, {"sw_thermal", 0x20}, {"hw_thermal", 0x40}, {"hw_power_brake", 0x80},
    {"display_clock", 0x100},
};

static nvmlReturn_t clock_reasons(nvmlDevice_t h, unsigned long long *mask) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!mask) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "clock_events", "clock_events", &v))) {
        *mask = 0;
        for (int i = 0; i < jlen(v); i++)
            for (size_t r = 0; r < sizeof REASONS / sizeof REASONS[0]; r++)
                if (v->items[i]->type == J_STR && !strcmp(v->items[i]->str, REASONS[r].name)) *mask |= REASONS[r].bit;
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *m) {
    return clock_reasons(h, m);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *m) {
    return clock_reasons(h, m);
}

static nvmlReturn_t pcie_field(nvmlDevice_t h, const char *field, unsigned *out) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!out) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "pcie", "pcie", &v))) {
        if (!jhas_num(v, field)) rc = NVML_ERROR_NOT_SUPPORTED;
        else *out = (unsigned)jnum(v, field, 0);
    }
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned *g) { return pcie_field(h, "gen", g); }
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned *w) { return pcie_field(h, "width", w); }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t h, unsigned *g) {
    return pcie_field(h, "max_gen", g);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t h, unsigned *w) { return pcie_field(h, "max_width", w); }
EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t h, unsigned *r) { return pcie_field(h, "replays", r); }

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t h, int *pstate) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!pstate) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "pstate", "pstate", &v))) *pstate = (int)v->num;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *mode) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!mode) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "persistence", "persistence", &v))) *mode = v->num != 0;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned link, int *active) {
    ENTER(h, 1)
    jv *v = NULL;
    if (!active) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!(rc = health_key(dev, inst, "nvlink", "nvlink", &v))) {
        jv *state_of = jat(v, (int)link);
        if (!state_of) rc = NVML_ERROR_INVALID_ARGUMENT; /* past the last link, as the real library */
        else *active = state_of->num != 0;
    }
    LEAVE
}

/* ---- events: Xid critical errors (what `dmesg` would say, seen without it) -------------------------------
 * A set registered for a device gets the device's "xids" entries appended after its registration, and those
 * marked "pending" (an Xid that happens right after any registration: a card that keeps failing). */

#define MAX_SETS 16
#define XID_EVENT 0x8ULL
#define SUPPORTED_EVENTS 0xFULL /* single/double bit ECC, pstate, Xid */

typedef struct {
    int used;
    unsigned long long mask[MAX_DEVICES];
    int base[MAX_DEVICES];   /* entries in "xids" when it registered */
    int cursor[MAX_DEVICES]; /* next entry to look at */
} fake_set;
typedef fake_set *nvmlEventSet_t;
static fake_set sets[MAX_SETS];

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

static int is_set(nvmlEventSet_t s) {
    uintptr_t at = (uintptr_t)s, base = (uintptr_t)sets;
    return at >= base && at < base + sizeof sets && !((at - base) % sizeof(fake_set)) && s->used;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc && !set) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        rc = 20;
        for (int i = 0; i < MAX_SETS; i++)
            if (!sets[i].used) {
                memset(&sets[i], 0, sizeof sets[i]);
                sets[i].used = 1;
                *set = &sets[i];
                rc = NVML_SUCCESS;
                break;
            }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = is_set(set) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) set->used = 0;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types) {
    ENTER(h, 1)
    if (!types) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, "events")) rc = NVML_ERROR_NOT_SUPPORTED;
    else if (denied(dev, "events")) rc = NVML_ERROR_NO_PERMISSION;
    else *types = SUPPORTED_EVENTS;
    LEAVE
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set) {
    ENTER(h, 1)
    if (!is_set(set) || h->index >= MAX_DEVICES) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (inst || unsupported(dev, "events") || (types & ~SUPPORTED_EVENTS)) rc = NVML_ERROR_NOT_SUPPORTED;
    else if (denied(dev, "events")) rc = NVML_ERROR_NO_PERMISSION;
    else {
        set->mask[h->index] |= types;
        set->base[h->index] = jlen(jget(dev, "xids"));
        set->cursor[h->index] = 0;
    }
    LEAVE
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = enter_system();
    if (!rc && (!is_set(set) || !data)) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        rc = 10; /* nothing queued: a wait of 0 ms answers at once */
        for (int d = 0; d < jlen(devices()) && d < MAX_DEVICES && rc; d++) {
            if (!(set->mask[d] & XID_EVENT)) continue;
            jv *xids = jget(device_at(d), "xids");
            while (set->cursor[d] < jlen(xids)) {
                jv *e = jat(xids, set->cursor[d]);
                int i = set->cursor[d]++;
                if (i < set->base[d] && !jnum(e, "pending", 0)) continue; /* before registration */
                handles[d][0].index = d;
                data->device = &handles[d][0];
                data->eventType = XID_EVENT;
                data->eventData = (unsigned long long)jnum(e, "xid", 0);
                data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
                rc = NVML_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    (void)timeout_ms;
    return event_wait(set, data);
}
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    (void)timeout_ms;
    return event_wait(set, data);
}
