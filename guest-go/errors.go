package ipam

import "fmt"

// Error is a CNI error (WIT record `error`): what a handler returns on failure. The
// host prints it and discards the call's store writes.
type Error struct {
	Code    uint32
	Msg     string
	Details string
}

func (e *Error) Error() string {
	if e.Details == "" {
		return fmt.Sprintf("code %d: %s", e.Code, e.Msg)
	}
	return fmt.Sprintf("code %d: %s (%s)", e.Code, e.Msg, e.Details)
}

// NewError is an error with `code` and a message for the runtime's user.
func NewError(code uint32, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// WithDetails sets the error's details (what an operator needs next) and returns it.
func (e *Error) WithDetails(details string) *Error {
	e.Details = details
	return e
}

// InvalidConfig is code 7: the network configuration is invalid.
func InvalidConfig(format string, args ...any) *Error {
	return NewError(CodeInvalidNetworkConfig, format, args...)
}

// Unsupported is code 121: the module does not implement what it was asked for.
func Unsupported(format string, args ...any) *Error {
	return NewError(CodeNotImplemented, format, args...)
}

// CNI error codes, from the one table the host and both SDKs share (codes/src/lib.rs;
// codes_test.go fails when they differ). A module may return the spec's codes, the
// SDK's and its own (CodeModuleSpecific and up); the host answers 107 for any other.
const (
	CodeIncompatibleCNIVersion                uint32 = 1
	CodeUnsupportedField                      uint32 = 2
	CodeUnknownContainer                      uint32 = 3
	CodeInvalidEnvironmentVariables           uint32 = 4
	CodeIOFailure                             uint32 = 5
	CodeDecodingFailure                       uint32 = 6
	CodeInvalidNetworkConfig                  uint32 = 7
	CodeTryAgainLater                         uint32 = 11
	CodePluginNotAvailable                    uint32 = 50
	CodePluginNotAvailableLimitedConnectivity uint32 = 51

	// The host's own (100-119): a module never returns them.
	CodeModuleRejected         uint32 = 100
	CodeModuleDigestMismatch   uint32 = 101
	CodeModuleTrapped          uint32 = 102
	CodeDeadlineExceeded       uint32 = 103
	CodeStoreFailure           uint32 = 104
	CodeLimitExceeded          uint32 = 105
	CodeInvalidModuleResult    uint32 = 106
	CodeReservedCodeFromModule uint32 = 107
	CodeStoreQuotaExceeded     uint32 = 108
	CodeInternalError          uint32 = 109
	CodeModuleUntrusted        uint32 = 110

	// The SDK's, on a module's behalf (120-139).
	CodeStoreWriteRefused uint32 = 120
	CodeNotImplemented    uint32 = 121

	// CodeModuleSpecific is the first code free for a module's own failures.
	CodeModuleSpecific uint32 = 140
)

// namedCodes is every named code by its name in codes/src/lib.rs, for the test that
// keeps the two tables equal.
var namedCodes = map[string]uint32{
	"INCOMPATIBLE_CNI_VERSION":                  CodeIncompatibleCNIVersion,
	"UNSUPPORTED_FIELD":                         CodeUnsupportedField,
	"UNKNOWN_CONTAINER":                         CodeUnknownContainer,
	"INVALID_ENVIRONMENT_VARIABLES":             CodeInvalidEnvironmentVariables,
	"IO_FAILURE":                                CodeIOFailure,
	"DECODING_FAILURE":                          CodeDecodingFailure,
	"INVALID_NETWORK_CONFIG":                    CodeInvalidNetworkConfig,
	"TRY_AGAIN_LATER":                           CodeTryAgainLater,
	"PLUGIN_NOT_AVAILABLE":                      CodePluginNotAvailable,
	"PLUGIN_NOT_AVAILABLE_LIMITED_CONNECTIVITY": CodePluginNotAvailableLimitedConnectivity,
	"MODULE_REJECTED":                           CodeModuleRejected,
	"MODULE_DIGEST_MISMATCH":                    CodeModuleDigestMismatch,
	"MODULE_TRAPPED":                            CodeModuleTrapped,
	"DEADLINE_EXCEEDED":                         CodeDeadlineExceeded,
	"STORE_FAILURE":                             CodeStoreFailure,
	"LIMIT_EXCEEDED":                            CodeLimitExceeded,
	"INVALID_MODULE_RESULT":                     CodeInvalidModuleResult,
	"RESERVED_CODE_FROM_MODULE":                 CodeReservedCodeFromModule,
	"STORE_QUOTA_EXCEEDED":                      CodeStoreQuotaExceeded,
	"INTERNAL_ERROR":                            CodeInternalError,
	"MODULE_UNTRUSTED":                          CodeModuleUntrusted,
	"STORE_WRITE_REFUSED":                       CodeStoreWriteRefused,
	"NOT_IMPLEMENTED":                           CodeNotImplemented,
	"MODULE_SPECIFIC":                           CodeModuleSpecific,
}
