; Inno Setup script for Hearth on Windows (x64). Input: the one-folder PyInstaller build in build\dist\hearth
; (packaging\hearth.spec, run on Windows). Output: build\dist\Hearth-VERSION-windows-x64-setup.exe
;
;   iscc /DAppVersion=0.1.0 packaging\windows\hearth.iss
;
; Codesigning (optional): define a Sign Tool named "hearthsign" on the command line and pass /DSIGN, e.g.
;   iscc /DAppVersion=0.1.0 /DSIGN "/Shearthsign=signtool sign /fd sha256 /tr http://timestamp.digicert.com /td sha256 /f $qC:\cert.pfx$q /p PASSWORD $f" packaging\windows\hearth.iss
; Setup, the uninstaller and the two executables are then signed ($f is the file to sign).
;
; Installs for the current user by default (no administrator rights); the first page offers "all users".
; Data and logs live in %LOCALAPPDATA%\Hearth (platformdirs); the uninstaller leaves them.

#if Ver < EncodeVer(6, 3, 0)
  #error Inno Setup 6.3 or newer is needed (x64compatible architecture identifier)
#endif
#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=X.Y.Z hearth.iss
#endif
#define Dist "..\..\build\dist\hearth"
#ifdef SIGN
  #define SignFlag "sign"
#else
  #define SignFlag ""
#endif

[Setup]
AppId={{6F3C2B8E-1D4A-4C57-9B0E-7A2E5D9C4F11}
AppName=Hearth
AppVersion={#AppVersion}
AppPublisher=Hearth
DefaultDirName={autopf}\Hearth
DefaultGroupName=Hearth
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
ChangesEnvironment=yes
OutputDir=..\..\build\dist
OutputBaseFilename=Hearth-{#AppVersion}-windows-x64-setup
SetupIconFile=..\..\resources\icons\hearth.ico
UninstallDisplayIcon={app}\hearth-app.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
CloseApplications=yes
#ifdef SIGN
SignTool=hearthsign
SignedUninstaller=yes
#endif

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "addtopath"; Description: "Add the hearth command to PATH (for terminals)"; Flags: checkedonce

[Files]
Source: "{#Dist}\hearth-app.exe"; DestDir: "{app}"; Flags: ignoreversion {#SignFlag}
Source: "{#Dist}\hearth.exe"; DestDir: "{app}"; Flags: ignoreversion {#SignFlag}
Source: "{#Dist}\_internal\*"; DestDir: "{app}\_internal"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Hearth"; Filename: "{app}\hearth-app.exe"
Name: "{autodesktop}\Hearth"; Filename: "{app}\hearth-app.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\hearth-app.exe"; Description: "{cm:LaunchProgram,Hearth}"; Flags: nowait postinstall skipifsilent

[Code]
// PATH for the hearth CLI: the user's PATH in a per-user install, the machine's in an all-users install.
function EnvRoot: Integer;
begin
  if IsAdminInstallMode then Result := HKEY_LOCAL_MACHINE else Result := HKEY_CURRENT_USER;
end;

function EnvKey: String;
begin
  if IsAdminInstallMode then
    Result := 'SYSTEM\CurrentControlSet\Control\Session Manager\Environment'
  else
    Result := 'Environment';
end;

function PathWithout(Path, Dir: String): String;
var
  P: Integer;
begin
  Result := ';' + Path + ';';
  P := Pos(';' + Uppercase(Dir) + ';', Uppercase(Result));
  if P > 0 then Delete(Result, P, Length(Dir) + 1);
  Result := Copy(Result, 2, Length(Result) - 2);
end;

procedure CurStepChanged(CurStep: TSetupStep);
var
  Path: String;
begin
  if (CurStep = ssPostInstall) and WizardIsTaskSelected('addtopath') then
  begin
    if not RegQueryStringValue(EnvRoot, EnvKey, 'Path', Path) then Path := '';
    Path := PathWithout(Path, ExpandConstant('{app}'));
    if Path <> '' then Path := Path + ';';
    RegWriteExpandStringValue(EnvRoot, EnvKey, 'Path', Path + ExpandConstant('{app}'));
  end;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
var
  Path: String;
begin
  if (CurUninstallStep = usPostUninstall) and RegQueryStringValue(EnvRoot, EnvKey, 'Path', Path) then
    RegWriteExpandStringValue(EnvRoot, EnvKey, 'Path', PathWithout(Path, ExpandConstant('{app}')));
end;
