// The Go side of the C callbacks (bridge.go): exported to C, so this file's preamble only
// declares.

package kvtier

/*
#include <stdint.h>
*/
import "C"

import "runtime/cgo"

// progressCall is what a progress handle holds: the user's function and the panic it
// raised, if any (re-raised in the caller's goroutine once the C call has returned).
type progressCall struct {
	fn       ProgressFunc
	panicked any
}

//export kvtGoProgress
func kvtGoProgress(handle C.uintptr_t, stage *C.char, done, total C.int64_t) (cancel C.int32_t) {
	call := cgo.Handle(handle).Value().(*progressCall)
	defer func() {
		if r := recover(); r != nil {
			call.panicked = r
			cancel = 1 // a panic must not unwind through C: cancel, re-raise after
		}
	}()
	if call.fn(C.GoString(stage), int64(done), int64(total)) {
		return 0
	}
	return 1
}

//export kvtGoLog
func kvtGoLog(level C.int32_t, message *C.char) {
	fn := currentLogFunc()
	if fn == nil {
		return
	}
	defer func() { _ = recover() }() // a panicking log function loses its message, nothing else
	fn(levelFromC(int32(level)), C.GoString(message))
}
