# Ends a call on the far side: bash -c <this> dsh-kill <call id> <signal> <grace ms>.
#
# Sends <signal> to every process carrying DSH_CALL=<call id> (sparing DSH_DETACH=1); for
# TERM, waits up to the grace for them to go and sends KILL to what is left. This is what
# reaches a `setsid` or double-forked escape: it left the call's process group, not its
# environment.
id=$1 sig=$2 grace=$3
marked() {
    PIDS=()
    local e p x mark detach entries
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/} p=${p%/environ}
        mapfile -d '' entries 2>/dev/null <"$e" || continue
        mark=0 detach=0
        for x in "${entries[@]}"; do
            case $x in "DSH_CALL=$id") mark=1 ;; DSH_DETACH=1) detach=1 ;; esac
        done
        [ $mark = 1 ] && [ $detach = 0 ] && PIDS+=("$p")
    done
}
marked
[ ${#PIDS[@]} -eq 0 ] && exit 0
kill -s "$sig" "${PIDS[@]}" 2>/dev/null
[ "$sig" = TERM ] || exit 0
waited=0
while [ "$waited" -lt "$grace" ]; do
    sleep 0.05
    waited=$((waited + 50))
    marked
    [ ${#PIDS[@]} -eq 0 ] && exit 0
done
kill -KILL "${PIDS[@]}" 2>/dev/null
exit 0
