#define _POSIX_C_SOURCE 200809L
/*
 * aclInit/aclFinalize, devices and streams over the native runtime (qmoe/runtime.h). A device id
 * selects one of QMOE_ACL_DEVICES devices (default 1), each a qmoe device of QMOE_ACL_THREADS
 * threads (default all online cores), created when first set or used and destroyed by the last
 * aclrtResetDevice or by aclFinalize. An aclrtStream is a native stream on its device: operators
 * launched on it run asynchronously until aclrtSynchronizeStream. The default (NULL) stream of a
 * device is a native stream too, but launches on it are synchronous (the launch waits).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "compat/compat.h"
#include "qmoe/runtime.h"

typedef struct device_slot {
    int refs;                     /* aclrtSetDevice calls not yet reset */
    qmoe_device *native;          /* created on first use */
    qmoe_stream *default_stream;  /* the NULL stream, created on first use */
    aclError default_status;      /* first launch failure on the NULL stream since a sync */
} device_slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int initialized;
static int generation; /* bumped by every aclInit, so thread-local devices of a past run expire */
static int device_count = 1;
static int device_threads = 1;
static device_slot devices[COMPAT_MAX_DEVICES];

static _Thread_local int tl_generation;
static _Thread_local int tl_device = -1;

void compat_lock(void) { pthread_mutex_lock(&lock); }
void compat_unlock(void) { pthread_mutex_unlock(&lock); }
int compat_initialized(void) { return atomic_load(&initialized); }
int compat_device_threads(void) { return device_threads; }

int compat_current_device(void) { return tl_generation == generation ? tl_device : -1; }

/* The calling thread's device (device 0 when none is set), its native device created on first
 * use. Lock held. Returns an aclError with the message recorded. */
static aclError use_device(const char *api, int *id)
{
    int d = compat_current_device();
    if (d < 0) d = 0;
    device_slot *slot = &devices[d];
    if (!slot->native) {
        qmoe_device_options o = {.threads = device_threads};
        qmoe_status st = qmoe_device_create(&o, &slot->native);
        if (st)
            return compat_fail(ACL_ERROR_RT_FAILURE, "%s: device %d cannot start: %s", api, d,
                               qmoe_last_error());
    }
    *id = d;
    return ACL_SUCCESS;
}

static void release_device(device_slot *slot)
{
    qmoe_stream_destroy(slot->default_stream);
    qmoe_device_destroy(slot->native);
    *slot = (device_slot){0};
}

/* A positive integer from the environment, `fallback` when unset. */
static int env_count(const char *name, long max, int fallback, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = fallback;
        return 1;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > max) return 0;
    *out = (int)v;
    return 1;
}

aclError aclInit(const char *configPath)
{
    if (configPath && *configPath) {
        FILE *f = fopen(configPath, "r");
        if (!f)
            return compat_fail(ACL_ERROR_INVALID_FILE, "aclInit: cannot read the config file '%s'",
                               configPath);
        fclose(f);
    }
    int threads, ndev;
    if (!env_count("QMOE_ACL_THREADS", 4096, qmoe_device_online_cores(), &threads))
        return compat_fail(ACL_ERROR_INVALID_PARAM,
                           "aclInit: QMOE_ACL_THREADS='%s' is not an integer in [1, 4096]",
                           getenv("QMOE_ACL_THREADS"));
    if (!env_count("QMOE_ACL_DEVICES", COMPAT_MAX_DEVICES, 1, &ndev))
        return compat_fail(ACL_ERROR_INVALID_PARAM,
                           "aclInit: QMOE_ACL_DEVICES='%s' is not an integer in [1, %d]",
                           getenv("QMOE_ACL_DEVICES"), COMPAT_MAX_DEVICES);
    compat_lock();
    if (atomic_load(&initialized)) {
        compat_unlock();
        return compat_fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialized");
    }
    generation++;
    device_count = ndev;
    device_threads = threads;
    atomic_store(&initialized, 1);
    compat_unlock();
    return ACL_SUCCESS;
}

aclError aclFinalize(void)
{
    compat_lock();
    if (!atomic_load(&initialized)) {
        compat_unlock();
        return compat_fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: not initialized");
    }
    compat_registry_release_all(); /* streams first: they wait for work using the memory */
    for (int i = 0; i < COMPAT_MAX_DEVICES; i++) release_device(&devices[i]);
    atomic_store(&initialized, 0);
    compat_unlock();
    return ACL_SUCCESS;
}

#define REQUIRE_INIT(api)                                                                          \
    do {                                                                                           \
        if (!compat_initialized())                                                                 \
            return compat_fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);    \
    } while (0)

static int valid_device(int32_t id) { return id >= 0 && id < device_count; }

aclError aclrtSetDevice(int32_t deviceId)
{
    REQUIRE_INIT("aclrtSetDevice");
    compat_lock();
    if (!valid_device(deviceId)) {
        int n = device_count;
        compat_unlock();
        return compat_fail(ACL_ERROR_RT_INVALID_DEVICEID,
                           "aclrtSetDevice: device %d does not exist (%d device%s; QMOE_ACL_DEVICES "
                           "sets the count)",
                           (int)deviceId, n, n == 1 ? "" : "s");
    }
    int saved_generation = tl_generation, saved_device = tl_device, id;
    tl_generation = generation;
    tl_device = deviceId;
    aclError err = use_device("aclrtSetDevice", &id);
    if (err) {
        tl_generation = saved_generation;
        tl_device = saved_device;
    } else {
        devices[deviceId].refs++;
    }
    compat_unlock();
    return err;
}

aclError aclrtResetDevice(int32_t deviceId)
{
    REQUIRE_INIT("aclrtResetDevice");
    compat_lock();
    if (!valid_device(deviceId)) {
        compat_unlock();
        return compat_fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtResetDevice: device %d does not exist",
                           (int)deviceId);
    }
    device_slot *slot = &devices[deviceId];
    if (slot->refs > 0 && --slot->refs == 0) {
        compat_registry_release_streams(deviceId);
        release_device(slot);
    }
    if (compat_current_device() == deviceId) tl_device = -1;
    compat_unlock();
    return ACL_SUCCESS;
}

aclError aclrtGetDevice(int32_t *deviceId)
{
    REQUIRE_INIT("aclrtGetDevice");
    if (!deviceId) return compat_fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
    compat_lock();
    int d = compat_current_device();
    compat_unlock();
    if (d < 0)
        return compat_fail(ACL_ERROR_RT_CONTEXT_NULL,
                           "aclrtGetDevice: no device is set on this thread (call aclrtSetDevice)");
    *deviceId = d;
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ streams ------------------- */

void compat_stream_release(void *stream)
{
    qmoe_stream_destroy(((compat_stream *)stream)->native);
    free(stream);
}

aclError aclrtCreateStream(aclrtStream *stream)
{
    static const char *api = "aclrtCreateStream";
    REQUIRE_INIT(api);
    if (!stream) return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", api);
    compat_stream *s = calloc(1, sizeof *s);
    if (!s) return compat_fail(ACL_ERROR_BAD_ALLOC, "%s: out of memory", api);
    compat_lock();
    aclError err = use_device(api, &s->device);
    if (!err && qmoe_stream_create(devices[s->device].native, &s->native))
        err = compat_fail(ACL_ERROR_RT_FAILURE, "%s: %s", api, qmoe_last_error());
    if (!err && !compat_registry_add(s, COMPAT_STREAM, s->device, compat_stream_release))
        err = compat_fail(ACL_ERROR_BAD_ALLOC, "%s: out of memory", api);
    compat_unlock();
    if (err) {
        qmoe_stream_destroy(s->native);
        free(s);
        return err;
    }
    *stream = s;
    return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream)
{
    REQUIRE_INIT("aclrtDestroyStream");
    if (!stream) return compat_fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: stream is NULL");
    compat_lock();
    int ok = compat_registry_remove(stream, COMPAT_STREAM);
    compat_unlock();
    if (!ok)
        return compat_fail(ACL_ERROR_INVALID_RESOURCE_HANDLE,
                           "aclrtDestroyStream: %p is not a live stream", stream);
    compat_stream_release(stream); /* waits for the work in flight */
    return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream)
{
    static const char *api = "aclrtSynchronizeStream";
    REQUIRE_INIT(api);
    compat_lock();
    qmoe_stream *native = NULL;
    aclError *launch = NULL, err = ACL_SUCCESS;
    if (stream) {
        if (compat_registry_has(stream, COMPAT_STREAM)) {
            native = ((compat_stream *)stream)->native;
            launch = &((compat_stream *)stream)->status;
        } else {
            err = compat_fail(ACL_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a live stream", api,
                              stream);
        }
    } else {
        int d = compat_current_device();
        device_slot *slot = &devices[d < 0 ? 0 : d];
        native = slot->default_stream;
        launch = &slot->default_status;
    }
    aclError launched = launch ? *launch : ACL_SUCCESS;
    if (launch) *launch = ACL_SUCCESS;
    compat_unlock();
    if (err) return err;
    /* Waiting happens outside the lock; a concurrent destroy of this stream is the caller's bug. */
    qmoe_status st = native ? qmoe_stream_synchronize(native) : QMOE_OK;
    if (st) return compat_fail((aclError)st, "%s: an operator failed: %s", api, qmoe_last_error());
    if (launched)
        return compat_fail(launched, "%s: an operator launched on this stream failed with %d (its "
                                     "launch returned the same code)", api, launched);
    return ACL_SUCCESS;
}

qmoe_stream *compat_native_stream(aclrtStream stream, aclnnStatus *err)
{
    *err = ACLNN_SUCCESS;
    if (stream) {
        if (compat_registry_has(stream, COMPAT_STREAM)) return ((compat_stream *)stream)->native;
        *err = ACLNN_ERR_PARAM_INVALID;
        return NULL;
    }
    int id = 0;
    if (use_device("aclnn", &id)) {
        *err = ACLNN_ERR_RUNTIME_ERROR;
        return NULL;
    }
    device_slot *slot = &devices[id];
    if (!slot->default_stream && qmoe_stream_create(slot->native, &slot->default_stream)) {
        *err = ACLNN_ERR_RUNTIME_ERROR;
        return NULL;
    }
    return slot->default_stream;
}

void compat_record_status(aclrtStream stream, aclError status)
{
    compat_lock();
    aclError *slot = NULL;
    if (compat_initialized()) {
        if (!stream) {
            int d = compat_current_device();
            slot = &devices[d < 0 ? 0 : d].default_status;
        } else if (compat_registry_has(stream, COMPAT_STREAM)) {
            slot = &((compat_stream *)stream)->status;
        }
    }
    if (slot && *slot == ACL_SUCCESS) *slot = status;
    compat_unlock();
}
