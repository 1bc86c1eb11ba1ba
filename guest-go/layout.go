package ipam

// Where the canonical ABI puts each value of the handler world in linear memory: the
// offsets the glue (abi_wasip1.go, host_wasip1.go) reads and writes at. Each is a
// figure of contract.golden, which the integration suite derives from wit/ipam.wit
// with wit-parser; contract_test.go checks these constants, and the glue's
// wasmimport and wasmexport declarations, against it.

// The records of cni:ipam/types.
const (
	requestSize          = 96
	requestCommand       = 0
	requestContainerID   = 4
	requestNetns         = 12
	requestIfname        = 20
	requestArgs          = 28
	requestNetworkName   = 36
	requestCNIVersion    = 44
	requestConfig        = 52
	requestPrevResult    = 60
	requestLockGrantedAt = 72
	requestNodeName      = 88

	argSize  = 16 // tuple<string, string>
	argKey   = 0
	argValue = 8

	wallInstantSeconds     = 0
	wallInstantNanoseconds = 8

	attachmentSize        = 16
	attachmentContainerID = 0
	attachmentIfname      = 8

	ipConfigSize    = 20
	ipConfigAddress = 0
	ipConfigGateway = 8

	routeSize     = 56
	routeDst      = 0
	routeGW       = 8
	routeMTU      = 20
	routeAdvMSS   = 28
	routePriority = 36
	routeTable    = 44
	routeScope    = 52

	dnsNameservers = 0
	dnsDomain      = 8
	dnsSearch      = 20
	dnsOptions     = 28

	ipamResultIPs    = 0
	ipamResultRoutes = 8
	ipamResultDNS    = 16

	errorSize    = 20
	errorCode    = 0
	errorMsg     = 4
	errorDetails = 12

	// Where the payload of an option or result lies past its discriminant: 4 for a
	// payload aligned to 4 (a string, a list, a u32, a record of those), 1 for a u8.
	payload4 = 4
	payload1 = 1
)

// Return areas of the handler's functions.
const (
	// result<ipam-result, error>: the discriminant, then either at 4.
	addReturnSize = 56
	// result<_, error>.
	unitReturnSize = 24
)

// Return areas of the store's functions.
const (
	// option<list<u8>>: the discriminant, the list at 4.
	getReturnSize = 12
	// result<_, store-error> and result<bool, store-error>: the discriminant; at 4 the
	// bool, or the store-error variant (its case at 4, its string at 8).
	writeReturnSize   = 16
	storeErrorPayload = 4
	// option<u32>: the discriminant, the u32 at 4.
	commitRoomReturnSize = 8
	// list<tuple<string, list<u8>>>.
	listReturnSize = 8
	entrySize      = 16
	entryKey       = 0
	entryValue     = 8
)

// The records of the optional exports (inspect, nodes, reservations, usage,
// capabilities) and their functions' return areas.
const (
	allocationSize        = 48
	allocationAddress     = 0
	allocationContainerID = 8
	allocationIfname      = 16
	allocationSince       = 24
	allocationAttributes  = 40
	attributeSize         = 16 // tuple<string, string>
	attributeName         = 0
	attributeValue        = 8

	poolSize        = 64
	poolName        = 0
	poolCapacity    = 8
	poolInUse       = 24
	poolExcluded    = 32
	poolCoolingDown = 40
	poolFree        = 48

	poolUsageSize        = 120
	poolUsageKind        = 0
	poolUsageName        = 4
	poolUsageParent      = 12
	poolUsageNode        = 24
	poolUsageCapacity    = 40
	poolUsageInUse       = 56
	poolUsageExcluded    = 64
	poolUsageCoolingDown = 72
	poolUsageReserved    = 80
	poolUsageBorrowed    = 88
	poolUsageFree        = 96
	poolUsageWarnPercent = 112

	reservationSize  = 32
	reservationCIDR  = 0
	reservationNote  = 8
	reservationSince = 16
	reservationHeld  = 24

	releaseReportSize      = 24
	releaseReportAddresses = 0
	releaseReportBlocks    = 8
	releaseReportNotes     = 16

	releasedAddressSize        = 24
	releasedAddressAddress     = 0
	releasedAddressContainerID = 8
	releasedAddressIfname      = 16

	functionSize   = 12
	functionName   = 0
	functionOrigin = 8

	// The context record (inspect's and nodes', the same layout). The exports take it
	// flattened into parameters; its size is contract.golden's.
	contextSize        = 48
	contextNetworkName = 0
	contextConfig      = 8
	contextNodeName    = 20
	contextNow         = 32

	// An option whose payload is aligned to 8 (a u64) holds it at 8.
	payload8 = 8

	// result<list<T>, error>, result<release-report, error>: the discriminant, then
	// either at 4.
	listResultSize        = 24
	releaseNodeReturnSize = 28
	// result<reservation, error>: the reservation is aligned to 8.
	reservationReturnSize    = 40
	reservationReturnPayload = 8
	// list<function>.
	functionsReturnSize = 8
)
