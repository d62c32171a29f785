package acpserver

import (
	"errors"
	"net/http"

	"github.com/agentpool/agentpool/httpapi"
	acp "github.com/coder/acp-go-sdk"
)

// JSON-RPC and ACP error codes the server answers with.
const (
	codeInvalidRequest = -32600
	codeInvalidParams  = -32602
	codeInternal       = -32603
	codeNotFound       = -32002 // ACP: resource not found
)

// reqErr turns an error into the ACP error the editor shows: its message
// is the daemon's own sentence (or err's text), and data carries the
// daemon's error code when there is one. An *acp.RequestError passes as
// is.
func reqErr(err error) error {
	if err == nil {
		return nil
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		return re
	}
	var ae *httpapi.Error
	if errors.As(err, &ae) {
		code := codeInternal
		switch {
		case ae.Status == http.StatusNotFound:
			code = codeNotFound
		case ae.Status == http.StatusBadRequest:
			code = codeInvalidParams
		case ae.Status >= 400 && ae.Status < 500:
			code = codeInvalidRequest
		}
		return &acp.RequestError{Code: code, Message: ae.Message, Data: map[string]any{"code": ae.Code}}
	}
	return &acp.RequestError{Code: codeInternal, Message: err.Error()}
}

// invalid is an invalid-params error with a message a person can act on.
func invalid(msg string) error {
	return &acp.RequestError{Code: codeInvalidParams, Message: msg}
}

// notFound is a resource-not-found error.
func notFound(msg string) error {
	return &acp.RequestError{Code: codeNotFound, Message: msg}
}
