// The C callbacks of the library (log messages, progress) reach Go through these
// trampolines: cgo can only call back into Go through exported functions (callbacks.go),
// and C takes them as plain function pointers. Go values cross as runtime/cgo Handles.

package kvtier

/*
#cgo LDFLAGS: -lkvtier
#include <stdint.h>
#include <stdlib.h>
#include "kvtier/kvtier.h"

int32_t kvtGoProgress(uintptr_t handle, char* stage, int64_t done, int64_t total);
void kvtGoLog(int32_t level, char* message);

static int32_t kvt_go_progress(void* user_data, const char* stage, int64_t done, int64_t total) {
  return kvtGoProgress((uintptr_t)user_data, (char*)stage, done, total);
}

static void kvt_go_log(void* user_data, int32_t level, const char* message) {
  (void)user_data;
  kvtGoLog(level, (char*)message);
}

static kvt_status kvt_go_model_load_with_progress(const char* directory, uintptr_t handle, uintptr_t* out,
                                                  char* errbuf, int32_t errbuf_len) {
  kvt_model* model = NULL;
  kvt_status status = kvt_model_load_with_progress(directory, handle != 0 ? kvt_go_progress : NULL,
                                                   (void*)handle, &model, errbuf, errbuf_len);
  *out = (uintptr_t)model;
  return status;
}

static kvt_status kvt_go_options_set_progress_callback(uintptr_t options, uintptr_t handle) {
  return kvt_options_set_progress_callback((kvt_options*)options, handle != 0 ? kvt_go_progress : NULL,
                                           (void*)handle);
}

static kvt_status kvt_go_set_log_callback(int32_t on, int32_t min_level) {
  return kvt_set_log_callback(on ? kvt_go_log : NULL, NULL, min_level);
}
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"

	"github.com/kvtier/kvtier/bindings/go/internal/capi"
)

func loadModelWithProgress(dir string, progress cgo.Handle) (capi.Struct_SS_kvt_model, error) {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	errbuf := make([]byte, 1024)
	var model C.uintptr_t
	st := C.kvt_go_model_load_with_progress(cdir, C.uintptr_t(progress), &model,
		(*C.char)(unsafe.Pointer(&errbuf[0])), C.int32_t(len(errbuf)))
	if st != 0 {
		return nil, newError(capi.Enum_SS_kvt_status(st), cString(errbuf))
	}
	return capi.SwigcptrStruct_SS_kvt_model(model), nil
}

// setOptionsProgress makes the options report context creation to the handle's function
// (0: no reports).
func setOptionsProgress(options capi.Struct_SS_kvt_options, progress cgo.Handle) error {
	return newError(capi.Enum_SS_kvt_status(C.kvt_go_options_set_progress_callback(C.uintptr_t(options.Swigcptr()),
		C.uintptr_t(progress))), "kvt_options_set_progress_callback")
}

func setLogCallback(on bool, minLevel int32) error {
	flag := C.int32_t(0)
	if on {
		flag = 1
	}
	return newError(capi.Enum_SS_kvt_status(C.kvt_go_set_log_callback(flag, C.int32_t(minLevel))),
		"kvt_set_log_callback: level out of range")
}
