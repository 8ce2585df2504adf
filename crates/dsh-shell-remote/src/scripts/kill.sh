# Ends a call on the far side: bash -c <this> dsh-kill <call id> <signal> <grace ms>.
#
# Sends <signal> to every process carrying DSH_CALL=<call id> (sparing DSH_DETACH=1); for
# TERM, waits up to the grace for them to go and sends KILL to what is left. This is what
# reaches a `setsid` or double-forked escape: it left the call's process group, not its
# environment. A kill that comes before the command started (its call script, marked
# DSH_CALL_SCRIPT=<call id>, is still starting it) waits for it to start.
id=$1 sig=$2 grace=$3
marked() {
    PIDS=() SCRIPT=0
    local e p x mark detach entries
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/} p=${p%/environ}
        mapfile -d '' entries 2>/dev/null <"$e" || continue
        mark=0 detach=0
        for x in "${entries[@]}"; do
            case $x in
                "DSH_CALL=$id") mark=1 ;;
                "DSH_CALL_SCRIPT=$id") SCRIPT=1 ;;
                DSH_DETACH=1) detach=1 ;;
            esac
        done
        [ $mark = 1 ] && [ $detach = 0 ] && PIDS+=("$p")
    done
}
sent=0 waited=0 starting=0
while :; do
    marked
    if [ ${#PIDS[@]} -gt 0 ]; then
        if [ $sent = 0 ]; then
            kill -s "$sig" "${PIDS[@]}" 2>/dev/null
            sent=1
            [ "$sig" = TERM ] || exit 0
        elif [ "$waited" -ge "$grace" ]; then
            kill -KILL "${PIDS[@]}" 2>/dev/null
            exit 0
        fi
    elif [ $sent = 1 ] || [ $SCRIPT = 0 ] || [ $starting -ge 5000 ]; then
        # All gone, or nothing left that could still start the command.
        exit 0
    fi
    sleep 0.02
    if [ $sent = 1 ]; then waited=$((waited + 20)); else starting=$((starting + 20)); fi
done
