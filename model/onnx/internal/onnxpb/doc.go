// Package onnxpb holds the Go code generated from ONNX's onnx.proto (IR
// version 8, as python3-onnx 1.12 ships it): the ModelProto that package
// onnx writes and reads.
package onnxpb

//go:generate ./generate.sh
