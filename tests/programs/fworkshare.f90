! What flang-19's device code asks of the x86-64 device runtime (device-rtl), checked from
! inside target regions:
! * a parallel region runs on a team of OpenMP threads (num_threads(3): three threads, each
!   its own number), and on the encountering thread alone when its if clause is false;
! * a worksharing loop without schedule clause gives each thread one contiguous block, the
!   first n mod p threads one iteration more (the static schedule, split as libomp splits it);
! * a second loop of the same parallel region reads what other threads wrote in the first:
!   the first loop's implicit barrier, which flang-19 does not emit on the device, must hold;
! * a reduction over a parallel loop;
! * omp_is_initial_device() is false in a target region (flang-19 calls libomp's function,
!   true in any host process: the device runtime answers for device code).
program fworkshare
  use omp_lib
  implicit none
  integer, parameter :: n = 100003
  integer :: owner(n), a(n), b(n), team(0:7), nthreads, serial_threads, i, t, bad, lo, hi, expect
  integer(8) :: total
  logical :: on_host
  if (omp_get_num_devices() < 1) then
    print '(a)', 'fworkshare: no device'
    stop 3
  end if
  owner = -1
  a = 0
  b = 0
  team = 0
  nthreads = 0
  serial_threads = 0
  total = 0
  !$omp target map(tofrom: owner, a, b, team, nthreads)
  !$omp parallel num_threads(3)
  !$omp atomic
  team(omp_get_thread_num()) = team(omp_get_thread_num()) + 1
  if (omp_get_thread_num() == 0) nthreads = omp_get_num_threads()
  !$omp do
  do i = 1, n
    owner(i) = omp_get_thread_num()
    a(i) = i
  end do
  !$omp end do
  !$omp do
  do i = 1, n
    b(i) = a(n + 1 - i)
  end do
  !$omp end do
  !$omp end parallel
  !$omp end target
  on_host = .true.
  !$omp target map(tofrom: serial_threads, on_host)
  on_host = omp_is_initial_device()
  !$omp parallel if(.false.)
  serial_threads = omp_get_num_threads()
  !$omp end parallel
  !$omp end target
  !$omp target parallel do reduction(+: total) map(tofrom: total)
  do i = 1, n
    total = total + i
  end do
  bad = 0
  if (nthreads /= 3 .or. any(team(0:2) /= 1) .or. any(team(3:7) /= 0)) then
    print '(a, i0, a, 8i3)', 'FAILED: num_threads(3) gave ', nthreads, ' threads, members', team
    bad = bad + 1
  end if
  if (on_host) then
    print '(a)', 'FAILED: omp_is_initial_device() is true in a target region'
    bad = bad + 1
  end if
  if (serial_threads /= 1) then
    print '(a, i0, a)', 'FAILED: parallel if(.false.) ran on ', serial_threads, ' threads'
    bad = bad + 1
  end if
  do t = 0, nthreads - 1
    lo = t * (n / nthreads) + min(t, mod(n, nthreads)) + 1
    hi = lo + n / nthreads - 1
    if (t < mod(n, nthreads)) hi = hi + 1
    expect = count(owner(lo:hi) == t)
    if (expect /= hi - lo + 1) then
      print '(a, i0, a, i0, a, i0, a)', 'FAILED: thread ', t, ' did not run iterations ', lo, ' to ', hi, ' alone'
      bad = bad + 1
    end if
  end do
  do i = 1, n
    if (b(i) /= n + 1 - i) then
      print '(a, i0, a)', 'FAILED: b(', i, ') read a(n+1-i) before it was written (no barrier)'
      bad = bad + 1
      exit
    end if
  end do
  if (total /= int(n, 8) * (n + 1) / 2) then
    print '(a, i0)', 'FAILED: reduction gave ', total
    bad = bad + 1
  end if
  if (bad == 0) then
    print '(a)', 'fworkshare: PASS'
  else
    print '(a, i0, a)', 'fworkshare: ', bad, ' check(s) failed'
    stop 1
  end if
end program
