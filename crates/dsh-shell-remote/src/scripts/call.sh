# One call on the far side: bash -c <this> dsh-call <call id> <workdir> <command> <input>
# <grace ms> <lease s>, started with DSH_CALL_SCRIPT=<call id> in its environment (which the
# command does not get).
#
# The command runs as `bash -c <command>` in a process group of its own, with DSH_CALL=<call
# id> in its environment (and so in every descendant's, unless one scrubs it). Its parent is
# a `sleep` that never reaps it, so its wait status stays readable in /proc/<pid>/stat
# (field 52) once it exits: the call can tell an exit from a signal. Then what is left of
# the call (every process carrying the marker, sparing DSH_DETACH=1) is killed, and one last
# frame goes to stderr: \037dsh-status exit=<n>|signal=<n>|spawn=<ERRNO> oom=<0|1>. The first
# frame, before anything else, says the script runs (\037dsh-status started).
#
# This script's stdin is the harness's control stream, lines of:
#   d <n>\n<n bytes>   input for the command (<input> 1: its stdin is a pipe fed from here;
#                      0: its stdin is /dev/null)
#   e                  end of the command's input
#   k <signal> <ms>    signal the call's processes; TERM escalates to KILL after <ms>
#   h                  the harness is still there
# Kills travel on the call's own stream, so they need no new channel or exec. The stream is
# also the call's lease: at its end, or when nothing came for <lease s> seconds (the
# harness sends `h` well within that), the harness is gone and the call is ended (TERM,
# <grace ms>, KILL), so a dropped connection or a killed harness orphans nothing.
id=$1 dir=$2 cmd=$3 input=$4 grace=$5 lease=$6
set -f
frame() { printf '\037dsh-status %s\n' "$1" >&2; }
frame started
if ! cd -- "$dir" 2>/dev/null; then
    if [ ! -e "$dir" ]; then frame 'spawn=ENOENT oom=0'
    elif [ ! -d "$dir" ]; then frame 'spawn=ENOTDIR oom=0'
    else frame 'spawn=EACCES oom=0'; fi
    exit 127
fi
# The out-of-memory kill counter of our own memory cgroup (v2 or v1), if one is readable.
oom_file=
while IFS=: read -r _ ctl path; do
    case ",$ctl," in
        ,,) c=/sys/fs/cgroup$path/memory.events ;;
        *,memory,*) c=/sys/fs/cgroup/memory$path/memory.oom_control ;;
        *) continue ;;
    esac
    if [ -r "$c" ]; then oom_file=$c; break; fi
done </proc/self/cgroup 2>/dev/null
if [ -z "$oom_file" ]; then
    for c in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
        if [ -r "$c" ]; then oom_file=$c; break; fi
    done
fi
oom_kills() {
    OOM=0
    [ -n "$oom_file" ] || return 0
    local k v
    while read -r k v; do [ "$k" = oom_kill ] && OOM=$v; done <"$oom_file"
}
# The microseconds since the epoch, in NOW.
now() {
    NOW=${EPOCHREALTIME/[.,]/}
    [ -n "$NOW" ] || NOW=$(date +%s%6N)
}
# The processes of the call, in PIDS: those whose environment holds DSH_CALL=<id> as a whole
# entry and not DSH_DETACH=1. Among few processes bash reads the environments itself; among
# many, one `grep` reads them all (so the cost stays small however many other processes run).
marked() {
    PIDS=()
    local e p x mark detach entries all files=() detached=()
    set +f
    all=(/proc/[0-9]*/environ)
    set -f
    if [ ${#all[@]} -gt 64 ] && command -v grep >/dev/null 2>&1; then
        mapfile -d '' files < <(grep -lszZxF "DSH_CALL=$id" "${all[@]}" 2>/dev/null)
        if [ ${#files[@]} -gt 0 ]; then
            mapfile -d '' detached < <(grep -lszZxF DSH_DETACH=1 "${files[@]}" 2>/dev/null)
        fi
        for e in "${files[@]}"; do
            for x in "${detached[@]}"; do [ "$x" = "$e" ] && continue 2; done
            p=${e#/proc/} p=${p%/environ}
            PIDS+=("$p")
        done
        return
    fi
    for e in "${all[@]}"; do
        mapfile -d '' entries 2>/dev/null <"$e" || continue
        case "${entries[*]}" in *"DSH_CALL=$id"*) ;; *) continue ;; esac
        mark=0 detach=0
        for x in "${entries[@]}"; do
            case $x in "DSH_CALL=$id") mark=1 ;; DSH_DETACH=1) detach=1 ;; esac
        done
        p=${e#/proc/} p=${p%/environ}
        [ $mark = 1 ] && [ $detach = 0 ] && PIDS+=("$p")
    done
}
# Sends $1 to the call's processes (and to the command's own process, which may not carry
# the marker yet); for TERM, a helper sends KILL to what is left once $2 ms have passed, by
# the clock, unless this script ended first.
signal_call() {
    local sig=$1 ms=$2 end x
    marked
    for x in "${PIDS[@]}"; do [ "$x" = "$pid" ] && break; done
    [ "$x" = "$pid" ] || PIDS+=("$pid")
    kill -s "$sig" "${PIDS[@]}" 2>/dev/null
    [ "$sig" = TERM ] || return 0
    now
    end=$((NOW + ms * 1000))
    (
        while now && [ "$NOW" -lt "$end" ]; do
            [ -d /proc/"$script" ] || exit 0
            sleep 0.05
        done
        marked
        kill -KILL "${PIDS[@]}" 2>/dev/null
    ) </dev/null >/dev/null 2>&1 &
}
# Reads the control stream (fd 4) until it ends or the lease runs out; then ends the call.
# With a spool directory, input chunks go there (numbered) for the feeder, so a command that
# does not read its input never holds up a kill; without one, they are written to the
# command's stdin (fd 9) directly.
control() {
    local op a b k=0
    trap '' PIPE
    [ -n "$spool" ] && exec 9>&-
    while :; do
        op=
        if ! read -r -t "$lease" op a b <&4; then
            signal_call TERM "$grace"
            return
        fi
        case $op in
            d)
                if [ -n "$spool" ]; then
                    head -c "$a" <&4 >"$spool/next" && mv -f "$spool/next" "$spool/$k"
                    k=$((k + 1))
                else
                    head -c "$a" <&4 | { cat >&9 2>/dev/null || cat >/dev/null; }
                fi
                ;;
            e) if [ -n "$spool" ]; then printf '%s\n' "$k" >"$spool/end"; else exec 9>&-; fi ;;
            k) signal_call "$a" "$b" ;;
        esac
    done
}
# Copies the spooled input chunks, in order, to the command's stdin (fd 9), which it closes
# after the last one once the input ended.
feed() {
    local k=0 delay=0.01 end
    trap '' PIPE
    while :; do
        if [ -e "$spool/$k" ]; then
            cat "$spool/$k" >&9 2>/dev/null
            rm -f "$spool/$k"
            k=$((k + 1)) delay=0.01
            continue
        fi
        end=
        [ -e "$spool/end" ] && read -r end <"$spool/end"
        [ "$end" = "$k" ] && return
        sleep "$delay"
        case $delay in 0.01) delay=0.05 ;; *) delay=0.2 ;; esac
    done
}
oom_kills
before=$OOM
script=$$
exec 4<&0 5>&1 6>&2 0</dev/null
# The command's stdin: a pipe (read end 8, write end 9, both reopened from one) or nothing.
if [ "$input" = 1 ]; then
    exec {p}<> <(:)
    exec 8</proc/self/fd/$p 9>/proc/self/fd/$p {p}>&-
else
    exec 8</dev/null 9>/dev/null
fi
exec 7< <(
    unset DSH_CALL_SCRIPT
    set -m
    # The command starts once its parent is the `sleep`: a bash parent would reap it. Only
    # then does it take the marker, so a kill that comes sooner (which waits while this
    # script lives) finds the command itself, never the starter before its parent is set.
    bash -c 'n=0; while [ $n -lt 100000 ] && { ! read -r c </proc/$PPID/comm || [ "$c" != sleep ]; }
        do n=$((n + 1)); done 2>/dev/null; export DSH_CALL=$2; exec bash -c "$1"' dsh-cmd "$cmd" "$id" \
        <&8 >&5 2>&6 4<&- 5>&- 6>&- 8<&- 9>&- &
    printf '%s\n' "$!"
    exec sleep 2147483647 </dev/null 2>/dev/null 4<&- 5>&- 6>&- 8<&- 9>&-
)
keeper=$!
exec 5>&- 8<&-
read -r pid <&7
spool= feeder=
if [ "$input" = 1 ]; then
    spool=$(mktemp -d 2>/dev/null) || spool=
    if [ -n "$spool" ]; then
        feed </dev/null >/dev/null 2>&1 4<&- 6>&- 7<&- &
        feeder=$!
    fi
fi
control </dev/null >/dev/null 2>&1 6>&- 7<&- &
controller=$!
exec 4<&- 9>&-
status=
delay=0.0002
while [ -n "$pid" ]; do
    stat=
    read -r stat 2>/dev/null </proc/"$pid"/stat || break
    rest=${stat##*) }
    fields=($rest)
    if [ "${fields[0]}" = Z ]; then status=${fields[49]}; break; fi
    read -r -t "$delay" -u 7 _
    case $? in 0 | 1) break ;; esac
    case $delay in 0.0002) delay=0.0005 ;; 0.0005) delay=0.001 ;; 0.001) delay=0.002 ;; 0.002) delay=0.005 ;; 0.005) delay=0.01 ;; 0.01) delay=0.02 ;; *) delay=0.05 ;; esac
done
marked
[ ${#PIDS[@]} -gt 0 ] && kill -KILL "${PIDS[@]}" 2>/dev/null
# (bash reports a killed job on its own stderr, which is the call's.)
exec 3>&2 2>/dev/null
kill -KILL "$keeper" "$controller" $feeder
wait "$keeper" "$controller" $feeder
exec 2>&3 3>&-
[ -n "$spool" ] && rm -rf -- "$spool"
oom_kills
oom=0
[ "$OOM" -gt "$before" ] 2>/dev/null && oom=1
if [ -z "$status" ]; then
    exit 255
elif [ $((status & 127)) -eq 0 ]; then
    frame "exit=$(((status >> 8) & 255)) oom=$oom"
    exit $(((status >> 8) & 255))
else
    frame "signal=$((status & 127)) oom=$oom"
    exit $((128 + (status & 127)))
fi
