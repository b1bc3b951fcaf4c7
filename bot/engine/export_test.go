package engine

// ApplyStep exposes applyStep to the external fuzz test, which also renders
// the result (package render imports engine).
var ApplyStep = applyStep

// StagingEvidence exposes stagingEvidence (R6) to the external unit test.
var StagingEvidence = stagingEvidence
