#!/bin/sh
# A launcher as most are (go run, npm start, dotnet run): it runs the real program as its child, without exec,
# and waits for it. A signal to this shell alone would leave the program running with the pipes open.
# Arguments: the module and its arguments (default: the reference adapter).
[ $# -eq 0 ] && set -- reference.adapter
"${PYTHON:-python3}" -m "$@"
status=$?
echo "wrapper: the adapter exited with status $status" >&2
exit $status
