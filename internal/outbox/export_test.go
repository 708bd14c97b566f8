package outbox

// QueryClaim is queryClaim, for the tests that explain it.
const QueryClaim = queryClaim

// QueryRecord is queryRecord, for the tests that explain it.
const QueryRecord = queryRecord

// RecordArgs are queryRecord's arguments for outs.
var RecordArgs = recordArgs
