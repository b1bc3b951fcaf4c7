package engine

// ApplyStep exposes applyStep to the external fuzz test, which also renders
// the result (package render imports engine).
var ApplyStep = applyStep
