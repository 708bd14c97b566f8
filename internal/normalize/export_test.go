package normalize

// ReferenceDecode is Decode's reference path, for the benchmarks of the
// external test package.
var ReferenceDecode = referenceDecode
